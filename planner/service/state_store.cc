#include "planner/service/state_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/atomic_file.h"

namespace dcp {
namespace {

constexpr size_t kMaxNameLength = 200;
// Marks WriteFileAtomically's temporary files; '~' is not allowed in keys, so
// a temporary file is never mistaken for a key.
constexpr absl::string_view kTempMarker = kAtomicFileTempMarker;
/// Not a valid key either, so Read() and List() never see it.
constexpr char kLockName[] = "~lock";

bool IsNameCharacter(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

}  // namespace

absl::Status StateStore::ValidateName(absl::string_view name) {
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "state key is empty; use 1 to 200 characters of [A-Za-z0-9._-]");
  }
  if (name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state key '", name.substr(0, 40), "...' has ", name.size(),
        " characters; use at most ", kMaxNameLength));
  }
  if (name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat(
        "state key '", name, "' names a directory; use a file name"));
  }
  for (char c : name) {
    if (!IsNameCharacter(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state key '", name, "' contains '", std::string(1, c),
          "'; use only [A-Za-z0-9._-]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(
    absl::string_view directory) {
  return Open(directory, Options());
}

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(
    absl::string_view directory, Options options) {
  if (options.write_attempts < 1 ||
      options.initial_backoff < absl::ZeroDuration() ||
      options.max_backoff < options.initial_backoff) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state store options: write_attempts = ", options.write_attempts,
        ", initial_backoff = ", absl::FormatDuration(options.initial_backoff),
        ", max_backoff = ", absl::FormatDuration(options.max_backoff),
        "; use write_attempts >= 1 and 0 <= initial_backoff <= max_backoff"));
  }
  if (directory.empty()) {
    return absl::InvalidArgumentError(
        "state directory is empty; give a directory path");
  }
  const std::string path(directory);
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create state directory '", path, "': ", error.message()));
  }
  if (!std::filesystem::is_directory(path, error)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state directory '", path, "' is not a directory"));
  }
  // Ours alone from here on: only then are leftover temporary files a dead
  // writer's.
  const std::string lock_path = absl::StrCat(path, "/", kLockName);
  const int lock_fd =
      ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) return FileSystemError("opening", lock_path, errno);
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int lock_error = errno;
    std::string holder;
    char buffer[64] = {};
    const ssize_t read_bytes = ::pread(lock_fd, buffer, sizeof(buffer) - 1, 0);
    if (read_bytes > 0) {
      holder = std::string(absl::StripAsciiWhitespace(
          absl::string_view(buffer, static_cast<size_t>(read_bytes))));
    }
    ::close(lock_fd);
    if (lock_error != EWOULDBLOCK) {
      return FileSystemError("locking", lock_path, lock_error);
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "state directory '", path, "' is in use by another planner",
        holder.empty() ? "" : absl::StrCat(" (process ", holder, ")"),
        "; stop it first, or give this planner its own state directory"));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(lock_fd, 0) != 0 ||
      ::pwrite(lock_fd, pid.data(), pid.size(), 0) !=
          static_cast<ssize_t>(pid.size())) {
    const int write_error = errno;
    ::close(lock_fd);
    return FileSystemError("writing", lock_path, write_error);
  }
  // Temporary files of writes interrupted by a crash.
  for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
    const std::string name = entry.path().filename().string();
    if (absl::StrContains(name, kTempMarker)) {
      std::error_code ignored;
      std::filesystem::remove(entry.path(), ignored);
    }
  }
  if (error) {
    ::close(lock_fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot list state directory '", path, "': ", error.message()));
  }
  return std::unique_ptr<StateStore>(
      new StateStore(path, lock_fd, std::move(options)));
}

StateStore::~StateStore() { ::close(lock_fd_); }  // releases the flock

std::string StateStore::PathOf(absl::string_view name) const {
  return absl::StrCat(directory_, "/", name);
}

absl::Status StateStore::Retrying(
    absl::FunctionRef<absl::Status()> attempt) const {
  absl::Duration backoff = options_.initial_backoff;
  absl::Duration waited = absl::ZeroDuration();
  int attempts = 1;
  absl::Status status = attempt();
  while (!status.ok() && attempts < options_.write_attempts) {
    if (options_.sleep) {
      options_.sleep(backoff);
    } else {
      absl::SleepFor(backoff);
    }
    waited += backoff;
    backoff = std::min(backoff * 2, options_.max_backoff);
    ++attempts;
    status = attempt();
  }
  if (status.ok()) return status;
  std::string fix;
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      fix = absl::StrCat("free space in '", directory_,
                         "' or point --state-dir elsewhere");
      break;
    case absl::StatusCode::kPermissionDenied:
      fix = absl::StrCat("make '", directory_,
                         "' writable by the planner or point --state-dir "
                         "elsewhere");
      break;
    default:
      fix = absl::StrCat("check '", directory_,
                         "' (free space, its disk, a file in the way) or "
                         "point --state-dir elsewhere");
      break;
  }
  return absl::Status(
      status.code(),
      absl::StrCat(status.message(), " (", attempts, " attempts over ",
                   absl::FormatDuration(waited), "); ", fix));
}

absl::Status StateStore::Write(absl::string_view name,
                               absl::string_view bytes) {
  if (absl::Status status = ValidateName(name); !status.ok()) return status;
  const std::string path = PathOf(name);
  // Held through the retries: a later write of `name` must not land before
  // this one's retry and be overwritten by the older value.
  absl::MutexLock lock(&write_mutex_);
  return Retrying([&] {
    return options_.write_file ? options_.write_file(path, bytes)
                               : WriteFileAtomically(path, bytes);
  });
}

absl::StatusOr<std::optional<std::string>> StateStore::Read(
    absl::string_view name) const {
  if (absl::Status status = ValidateName(name); !status.ok()) return status;
  const std::string path = PathOf(name);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return FileSystemError("opening", path, errno);
  }
  std::string bytes;
  char buffer[1 << 16];
  while (true) {
    const ssize_t count = ::read(fd, buffer, sizeof buffer);
    if (count < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return FileSystemError("reading", path, error);
    }
    if (count == 0) break;
    bytes.append(buffer, static_cast<size_t>(count));
  }
  ::close(fd);
  return std::optional<std::string>(std::move(bytes));
}

absl::StatusOr<std::vector<std::string>> StateStore::List(
    absl::string_view prefix) const {
  DIR* dir = ::opendir(directory_.c_str());
  if (dir == nullptr) return FileSystemError("listing", directory_, errno);
  std::vector<std::string> names;
  while (true) {
    errno = 0;
    const dirent* entry = ::readdir(dir);
    if (entry == nullptr) break;
    const absl::string_view name(entry->d_name);
    if (!absl::StartsWith(name, prefix)) continue;
    if (!ValidateName(name).ok()) continue;  // temporary files, "." and ".."
    names.emplace_back(name);
  }
  const int error = errno;
  ::closedir(dir);
  if (error != 0) return FileSystemError("listing", directory_, error);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status StateStore::Delete(absl::string_view name) {
  if (absl::Status status = ValidateName(name); !status.ok()) return status;
  absl::MutexLock lock(&write_mutex_);
  const std::string path = PathOf(name);
  return Retrying([&] {
    if (::unlink(path.c_str()) != 0) {
      if (errno == ENOENT) return absl::OkStatus();
      return FileSystemError("removing", path, errno);
    }
    return SyncDirectory(directory_);
  });
}

absl::Status StateStore::Rename(absl::string_view from, absl::string_view to) {
  if (absl::Status status = ValidateName(from); !status.ok()) return status;
  if (absl::Status status = ValidateName(to); !status.ok()) return status;
  absl::MutexLock lock(&write_mutex_);
  const std::string from_path = PathOf(from);
  if (::rename(from_path.c_str(), PathOf(to).c_str()) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("state file '", from_path, "' does not exist"));
    }
    return FileSystemError("renaming", from_path, errno);
  }
  return SyncDirectory(directory_);
}

}  // namespace dcp
