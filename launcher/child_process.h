// Child processes for launchers and tests: fork/exec with stdout read line by
// line, stderr to a file, and no orphans.

#ifndef DCP_LAUNCHER_CHILD_PROCESS_H_
#define DCP_LAUNCHER_CHILD_PROCESS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dcp {

/// One child process. Its stdout is read by a thread of this object and
/// handed to `on_stdout_line` one line at a time (without the newline, from
/// that thread); its stderr goes to a file (appended); its stdin is
/// /dev/null. The child runs in its own process group (so a terminal's
/// Ctrl-C reaches only the launcher, which decides what to stop) and is
/// killed (SIGKILL) by the kernel if the thread that started it exits, so a
/// crashed launcher leaves no orphans; start children from the main thread.
/// The destructor kills a child that is still running and reaps it.
///
/// Thread-safe: every method may be called from any thread.
class ChildProcess {
 public:
  using LineCallback = std::function<void(const std::string& line)>;

  /// Starts `argv[0]` (a path; not searched in $PATH) with `argv` and, in
  /// addition to this process's environment, `extra_environment`
  /// ("NAME=value" entries). INVALID_ARGUMENT for an empty argv or a
  /// program that is not an executable file; INTERNAL when the stderr file,
  /// a pipe or fork() fails.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      const std::vector<std::string>& argv, const std::string& stderr_path,
      LineCallback on_stdout_line,
      const std::vector<std::string>& extra_environment = {});

  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  /// The exit code if the child has exited (128 + N when killed by signal
  /// N), without blocking; nullopt while it runs.
  std::optional<int> Poll();
  /// Waits up to `timeout` for the child to exit; its exit code, or nullopt
  /// if it is still running.
  std::optional<int> WaitFor(absl::Duration timeout);
  /// Sends `signal_number` to the child if it is still running.
  void Signal(int signal_number);
  /// SIGKILLs the child if still running and waits for it; its exit code.
  int Kill();
  /// SIGTERM, then SIGKILL if the child has not exited within `grace`;
  /// waits for it and for its output; its exit code.
  int Stop(absl::Duration grace);

  /// Waits until the stdout reader has seen end of file (the child and
  /// anything it started closed the pipe). Call after the child exited.
  void JoinOutput();

 private:
  ChildProcess(pid_t pid, int stdout_fd, LineCallback on_stdout_line);
  void ReadOutput();

  const pid_t pid_;
  const int stdout_fd_;
  LineCallback on_stdout_line_;

  absl::Mutex mutex_;
  /// Set once waitpid() has reaped the child.
  std::optional<int> exit_code_ ABSL_GUARDED_BY(mutex_);
  std::thread reader_;
};

/// The last `count` lines of the file at `path` (a child's log), each
/// indented by four spaces and ended by a newline, for quoting in an error;
/// empty when the file does not read.
std::string LogTail(const std::string& path, int count);

}  // namespace dcp

#endif  // DCP_LAUNCHER_CHILD_PROCESS_H_
