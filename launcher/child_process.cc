#include "launcher/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace dcp {
namespace {

int ExitCode(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::vector<std::string>& argv, const std::string& stderr_path,
    LineCallback on_stdout_line,
    const std::vector<std::string>& extra_environment) {
  if (argv.empty()) {
    return absl::InvalidArgumentError("ChildProcess::Start: argv is empty");
  }
  if (::access(argv[0].c_str(), X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        argv[0], " is not an executable file (", std::strerror(errno), ")"));
  }
  // Everything the child needs is prepared before fork(): between fork()
  // and exec() it may only make async-signal-safe calls.
  std::vector<char*> arguments;
  for (const std::string& argument : argv) {
    arguments.push_back(const_cast<char*>(argument.c_str()));
  }
  arguments.push_back(nullptr);
  std::vector<char*> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    environment.push_back(*entry);
  }
  for (const std::string& entry : extra_environment) {
    environment.push_back(const_cast<char*>(entry.c_str()));
  }
  environment.push_back(nullptr);

  const int stderr_fd = ::open(stderr_path.c_str(),
                               O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (stderr_fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open ", stderr_path, ": ", std::strerror(errno)));
  }
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int pipe_fds[2];
  if (null_fd < 0 || ::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const std::string error = std::strerror(errno);
    ::close(stderr_fd);
    if (null_fd >= 0) ::close(null_fd);
    return absl::InternalError(absl::StrCat("cannot make a pipe: ", error));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const std::string error = std::strerror(errno);
    ::close(stderr_fd);
    ::close(null_fd);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", error));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // The parent already died.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::dup2(stderr_fd, STDERR_FILENO);
    ::execve(arguments[0], arguments.data(), environment.data());
    constexpr char kMessage[] = "ChildProcess: execve failed\n";
    (void)!::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    ::_exit(127);
  }
  ::close(stderr_fd);
  ::close(null_fd);
  ::close(pipe_fds[1]);
  return std::unique_ptr<ChildProcess>(
      new ChildProcess(pid, pipe_fds[0], std::move(on_stdout_line)));
}

ChildProcess::ChildProcess(pid_t pid, int stdout_fd,
                           LineCallback on_stdout_line)
    : pid_(pid),
      stdout_fd_(stdout_fd),
      on_stdout_line_(std::move(on_stdout_line)) {
  reader_ = std::thread([this] { ReadOutput(); });
}

ChildProcess::~ChildProcess() {
  Kill();
  JoinOutput();
  ::close(stdout_fd_);
}

void ChildProcess::ReadOutput() {
  std::string pending;
  char buffer[4096];
  while (true) {
    const ssize_t count = ::read(stdout_fd_, buffer, sizeof(buffer));
    if (count < 0 && errno == EINTR) continue;
    if (count <= 0) break;
    pending.append(buffer, static_cast<size_t>(count));
    size_t newline;
    while ((newline = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      if (on_stdout_line_) on_stdout_line_(line);
    }
  }
  if (!pending.empty() && on_stdout_line_) on_stdout_line_(pending);
}

std::optional<int> ChildProcess::Poll() {
  absl::MutexLock lock(&mutex_);
  if (exit_code_.has_value()) return exit_code_;
  int status = 0;
  const pid_t reaped = ::waitpid(pid_, &status, WNOHANG);
  if (reaped == pid_) exit_code_ = ExitCode(status);
  return exit_code_;
}

std::optional<int> ChildProcess::WaitFor(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (std::optional<int> code = Poll(); code.has_value()) return code;
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void ChildProcess::Signal(int signal_number) {
  absl::MutexLock lock(&mutex_);
  // An exited but unreaped child keeps its pid, so this never hits another
  // process.
  if (!exit_code_.has_value()) ::kill(pid_, signal_number);
}

int ChildProcess::Kill() {
  absl::MutexLock lock(&mutex_);
  if (!exit_code_.has_value()) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    exit_code_ = ExitCode(status);
  }
  return *exit_code_;
}

int ChildProcess::Stop(absl::Duration grace) {
  Signal(SIGTERM);
  std::optional<int> code = WaitFor(grace);
  const int exit_code = code.has_value() ? *code : Kill();
  JoinOutput();
  return exit_code;
}

void ChildProcess::JoinOutput() {
  static absl::Mutex join_mutex(absl::kConstInit);
  absl::MutexLock lock(&join_mutex);
  if (reader_.joinable()) reader_.join();
}

std::string LogTail(const std::string& path, int count) {
  std::ifstream file(path);
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(file, line)) {
    lines.push_back(line);
    if (static_cast<int>(lines.size()) > count) lines.pop_front();
  }
  std::string text;
  for (const std::string& kept : lines) {
    absl::StrAppend(&text, "    ", kept, "\n");
  }
  return text;
}

}  // namespace dcp
