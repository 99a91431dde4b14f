#ifndef DCP_PLANNER_SERVICE_STATE_STORE_H_
#define DCP_PLANNER_SERVICE_STATE_STORE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dcp {

/// A small durable key-value store: one file per key in one directory.
///
/// Write() is atomic and durable (common/atomic_file.h's
/// WriteFileAtomically): the bytes go to a temporary file in the same
/// directory, which is fsynced, renamed over the key's file, and the
/// directory is fsynced. A crash leaves either the old or the new value;
/// a leftover temporary file (whose name is never a valid key) is ignored
/// by Read() and List() and removed by Open().
///
/// Keys are simple file names: 1 to 200 characters of [A-Za-z0-9._-], not
/// "." or "..". Thread-safe: writes are serialized by a mutex; reads may run
/// concurrently with them.
///
/// One store per directory: Open() takes an exclusive lock (flock) on the
/// file "~lock" in it, held until the store is destroyed, so that a second
/// planner (say, a new pod of a rolling update sharing the volume) cannot
/// interleave its writes with a live one's or delete its temporary files.
class StateStore {
 public:
  /// Attempts of a write, removal or rename in all, the first included.
  static constexpr int kWriteAttempts = 5;
  /// The wait before the second attempt; each later one twice as long, up
  /// to kMaxWriteBackoff: 0.25 + 0.5 + 1 + 2 = 3.75 s in all, well inside a
  /// client's call deadline (10 s by default).
  static constexpr absl::Duration kInitialWriteBackoff =
      absl::Milliseconds(250);
  static constexpr absl::Duration kMaxWriteBackoff = absl::Seconds(2);

  struct Options {
    /// How a failed write (a full disk, an I/O error) is retried before it
    /// is reported: `write_attempts` attempts in all, waiting
    /// `initial_backoff`, then twice as long each time up to `max_backoff`.
    int write_attempts = kWriteAttempts;
    absl::Duration initial_backoff = kInitialWriteBackoff;
    absl::Duration max_backoff = kMaxWriteBackoff;
    /// Waits between attempts; absl::SleepFor when empty.
    std::function<void(absl::Duration)> sleep;
    /// Writes a key's file; WriteFileAtomically when empty. Tests inject a
    /// failing one.
    std::function<absl::Status(const std::string& path,
                               absl::string_view bytes)>
        write_file;
  };

  /// Opens `directory`, creating it (and missing parents) if needed.
  /// FAILED_PRECONDITION if another live store holds it (naming the process
  /// that holds it); INVALID_ARGUMENT for bad `options`.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(
      absl::string_view directory, Options options);
  /// Same, with the default Options.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(
      absl::string_view directory);

  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  /// Replaces the value of `name` atomically and durably. A failed write
  /// (a full disk, an I/O error) is retried as Options say, holding up the
  /// store's other writes; then its error (RESOURCE_EXHAUSTED for a full
  /// disk, PERMISSION_DENIED for a read-only directory, INTERNAL otherwise)
  /// names the file, the errno text and what to do.
  absl::Status Write(absl::string_view name, absl::string_view bytes);
  /// The value of `name`, or nullopt if it was never written.
  absl::StatusOr<std::optional<std::string>> Read(absl::string_view name) const;
  /// Keys starting with `prefix`, sorted.
  absl::StatusOr<std::vector<std::string>> List(absl::string_view prefix) const;
  /// Removes `name` durably; removing a missing key is not an error.
  /// Retried and reported as Write().
  absl::Status Delete(absl::string_view name);
  /// Renames `from` to `to` durably (replacing any `to`), e.g. to set a
  /// record aside; NOT_FOUND naming `from` when there is no such key. Not
  /// retried (it runs only while loading).
  absl::Status Rename(absl::string_view from, absl::string_view to);

  /// INVALID_ARGUMENT naming `name` unless it is a valid key.
  static absl::Status ValidateName(absl::string_view name);

  const std::string& directory() const { return directory_; }

 private:
  StateStore(std::string directory, int lock_fd, Options options)
      : directory_(std::move(directory)),
        lock_fd_(lock_fd),
        options_(std::move(options)) {}

  std::string PathOf(absl::string_view name) const;
  /// Runs `attempt` (one write or removal) until it succeeds or
  /// `options_.write_attempts` have failed, waiting with backoff between
  /// them; then the last error, with the attempts, the time waited and what
  /// to do about the directory. Callers hold `write_mutex_`.
  absl::Status Retrying(absl::FunctionRef<absl::Status()> attempt) const;

  const std::string directory_;
  /// The open "~lock" file whose flock this store holds.
  const int lock_fd_;
  const Options options_;
  /// Serializes Write(), Delete() and Rename() (WriteFileAtomically names
  /// its own temporary files).
  absl::Mutex write_mutex_;
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_STATE_STORE_H_
