#ifndef DCP_COMMON_ATOMIC_FILE_H_
#define DCP_COMMON_ATOMIC_FILE_H_

// Durable whole-file replacement, and the status an errno maps to.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dcp {

/// Marks WriteFileAtomically's temporary files: each is named
/// `<path>~tmp.<pid>.<n>`, so a directory's owner can recognise (and remove)
/// the leftovers of a writer that crashed.
inline constexpr absl::string_view kAtomicFileTempMarker = "~tmp.";

/// Replaces the file at `path` by `contents`, atomically and durably: the
/// bytes go to a new temporary file in the same directory, which is fsynced,
/// renamed over `path`, and then the directory is fsynced. A crash leaves
/// either the old or the new contents at `path`; on error the temporary file
/// is removed and `path` is unchanged. Errors as FileSystemError (naming the
/// file and the errno text). Thread-safe; concurrent writers of one path
/// each write whole files, the last rename wins.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents);

/// fsyncs `directory`, so that renames and removals in it are durable.
absl::Status SyncDirectory(const std::string& directory);

/// The status of a failed file operation: "<what> '<path>' failed: <errno
/// text>" with code RESOURCE_EXHAUSTED for ENOSPC/EDQUOT (the disk is full),
/// PERMISSION_DENIED for EACCES/EPERM/EROFS, INTERNAL otherwise.
absl::Status FileSystemError(absl::string_view what, absl::string_view path,
                             int error);

}  // namespace dcp

#endif  // DCP_COMMON_ATOMIC_FILE_H_
