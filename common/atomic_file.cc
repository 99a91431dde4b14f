#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace dcp {
namespace {

/// Makes temporary file names unique within the process.
std::atomic<uint64_t> next_temp_id{0};

// Writes all of `bytes` to `fd`, retrying on EINTR and short writes; 0 or
// the errno of the failure.
int WriteAll(int fd, absl::string_view bytes) {
  const char* data = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += written;
    left -= static_cast<size_t>(written);
  }
  return 0;
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::Status FileSystemError(absl::string_view what, absl::string_view path,
                             int error) {
  std::string message =
      absl::StrCat(what, " '", path, "' failed: ", std::strerror(error));
  if (error == ENOSPC || error == EDQUOT) {
    return absl::ResourceExhaustedError(message);
  }
  if (error == EACCES || error == EPERM || error == EROFS) {
    return absl::PermissionDeniedError(message);
  }
  return absl::InternalError(message);
}

absl::Status SyncDirectory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileSystemError("opening directory", directory, errno);
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0)
    return FileSystemError("fsync of directory", directory, error);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents) {
  const std::string temp_path =
      absl::StrCat(path, kAtomicFileTempMarker, ::getpid(), ".",
                   next_temp_id.fetch_add(1, std::memory_order_relaxed));
  const int fd =
      ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return FileSystemError("creating", temp_path, errno);
  int error = WriteAll(fd, contents);
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    ::unlink(temp_path.c_str());
    return FileSystemError("writing", temp_path, error);
  }
  if (::rename(temp_path.c_str(), path.c_str()) != 0) {
    error = errno;
    ::unlink(temp_path.c_str());
    return FileSystemError("renaming to", path, error);
  }
  return SyncDirectory(DirectoryOf(path));
}

}  // namespace dcp
