#include "worker/communication/multiprocess_test_util.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

extern char** environ;

namespace dcp {
namespace testing {
namespace {

// Environment variables RunRanks sets for its children.
constexpr char kEnvRankMain[] = "DCP_RANKS_MAIN";
constexpr char kEnvRank[] = "DCP_RANKS_RANK";
constexpr char kEnvWorldSize[] = "DCP_RANKS_WORLD_SIZE";
constexpr char kEnvArg[] = "DCP_RANKS_ARG";
constexpr char kEnvScratchDir[] = "DCP_RANKS_SCRATCH_DIR";

// Variables a child must not inherit: GoogleTest/Bazel output files (a child
// must not create or truncate them), sharding (a child must run exactly the
// test that spawned it), and our own (set afresh per child).
constexpr const char* kEnvDropped[] = {
    "TEST_PREMATURE_EXIT_FILE",
    "XML_OUTPUT_FILE",
    "GTEST_OUTPUT",
    "TEST_SHARD_STATUS_FILE",
    "TEST_TOTAL_SHARDS",
    "TEST_SHARD_INDEX",
    "GTEST_SHARD_STATUS_FILE",
    "GTEST_TOTAL_SHARDS",
    "GTEST_SHARD_INDEX",
    kEnvRankMain,
    kEnvRank,
    kEnvWorldSize,
    kEnvArg,
    kEnvScratchDir,
};

constexpr char kStorePortFile[] = "store_port";

// Exit code of a child in which this library itself failed.
constexpr int kChildSetupFailure = 2;

std::map<std::string, RankMain>& Registry() {
  static auto* registry = new std::map<std::string, RankMain>();
  return *registry;
}

std::mutex& RegistryMutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

const RankMain* FindRankMain(const std::string& name) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto it = Registry().find(name);
  return it == Registry().end() ? nullptr : &it->second;
}

const char* GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

absl::StatusOr<std::string> ScratchDirOfChild() {
  if (!IsRankChild()) {
    return absl::FailedPreconditionError(
        "only a process started by dcp::testing::RunRanks has a scratch "
        "folder shared with the other ranks");
  }
  return std::string(GetEnv(kEnvScratchDir));
}

std::string ErrnoMessage(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

/// "--gtest_filter=Suite.Test" for the test running now, or "" outside one.
std::string CurrentTestFilter() {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return "";
  return absl::StrCat("--gtest_filter=", info->test_suite_name(), ".",
                      info->name());
}

/// Runs `kEnvRankMain` for this child; never returns.
[[noreturn]] void RunChild() {
  RankContext context;
  const std::string name = GetEnv(kEnvRankMain);
  context.arg = GetEnv(kEnvArg);
  context.scratch_dir = GetEnv(kEnvScratchDir);
  const RankMain* rank_main = FindRankMain(name);
  if (!absl::SimpleAtoi(GetEnv(kEnvRank), &context.rank) ||
      !absl::SimpleAtoi(GetEnv(kEnvWorldSize), &context.world_size) ||
      rank_main == nullptr) {
    std::fprintf(stderr,
                 "[rank ?] bad child environment: %s=\"%s\" (registered: %s), "
                 "%s=\"%s\", %s=\"%s\"\n",
                 kEnvRankMain, name.c_str(),
                 rank_main == nullptr ? "no" : "yes", kEnvRank,
                 GetEnv(kEnvRank), kEnvWorldSize, GetEnv(kEnvWorldSize));
    std::fflush(nullptr);
    std::_Exit(kChildSetupFailure);
  }
  absl::Status status;
  try {
    status = (*rank_main)(context);
  } catch (const std::exception& e) {
    status =
        absl::InternalError(absl::StrCat("uncaught exception: ", e.what()));
  } catch (...) {
    status = absl::InternalError("uncaught exception of unknown type");
  }
  if (!status.ok()) {
    std::fprintf(stderr, "[rank %d] rank main %s failed: %s\n", context.rank,
                 name.c_str(), status.ToString().c_str());
  }
  std::fflush(nullptr);
  // Skips static destructors: LibTorch's may run after other libraries'.
  std::_Exit(status.ok() ? 0 : 1);
}

/// Runs the rank main in children started under GoogleTest.
class RankChildEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { RunRankMainIfChild(); }
};

[[maybe_unused]] ::testing::Environment* const kRankChildEnvironment =
    ::testing::AddGlobalTestEnvironment(new RankChildEnvironment());

/// Builds "NAME=value" strings of this process's environment for a child.
std::vector<std::string> ChildEnvironment(int rank, int world_size,
                                          absl::string_view name,
                                          absl::string_view arg,
                                          const std::string& scratch_dir) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    absl::string_view variable(*entry);
    bool dropped = false;
    for (const char* drop : kEnvDropped) {
      if (absl::StartsWith(variable, absl::StrCat(drop, "="))) dropped = true;
    }
    if (!dropped) env.emplace_back(variable);
  }
  env.push_back(absl::StrCat(kEnvRankMain, "=", name));
  env.push_back(absl::StrCat(kEnvRank, "=", rank));
  env.push_back(absl::StrCat(kEnvWorldSize, "=", world_size));
  env.push_back(absl::StrCat(kEnvArg, "=", arg));
  env.push_back(absl::StrCat(kEnvScratchDir, "=", scratch_dir));
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 255;
}

/// Kills and reaps every child still running (pid > 0).
void KillAll(std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    if (pid > 0) kill(pid, SIGKILL);
  }
  for (pid_t& pid : pids) {
    if (pid > 0) {
      int wait_status = 0;
      while (waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
      }
      pid = 0;
    }
  }
}

}  // namespace

bool RegisterRankMain(const std::string& name, RankMain rank_main) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  const bool inserted = Registry().emplace(name, std::move(rank_main)).second;
  if (!inserted) {
    std::fprintf(stderr, "RegisterRankMain: \"%s\" is registered twice\n",
                 name.c_str());
    std::abort();
  }
  return true;
}

bool IsRankChild() { return GetEnv(kEnvRankMain)[0] != '\0'; }

void RunRankMainIfChild() {
  if (IsRankChild()) RunChild();
}

::testing::AssertionResult EveryRankSucceeded(int world_size,
                                              absl::Duration timeout,
                                              absl::string_view name,
                                              absl::string_view arg) {
  const absl::StatusOr<std::vector<int>> exit_codes =
      RunRanks(world_size, timeout, name, arg);
  if (!exit_codes.ok()) {
    return ::testing::AssertionFailure()
           << "RunRanks(\"" << name << "\"): " << exit_codes.status();
  }
  for (int code : *exit_codes) {
    if (code != 0) {
      return ::testing::AssertionFailure()
             << "rank main \"" << name << "\" exit codes by rank: "
             << absl::StrJoin(*exit_codes, ", ")
             << " (the children's stderr above says why)";
    }
  }
  return ::testing::AssertionSuccess();
}

absl::Status PublishStorePort(int port) {
  absl::StatusOr<std::string> dir = ScratchDirOfChild();
  if (!dir.ok()) return dir.status();
  const std::string path = absl::StrCat(*dir, "/", kStorePortFile);
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << port << "\n";
    if (!out.flush()) {
      return absl::InternalError(absl::StrCat("cannot write ", temporary));
    }
  }
  // Atomic: readers see either no file or the whole port.
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return absl::InternalError(
        ErrnoMessage(absl::StrCat("rename ", temporary, " to ", path)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> AwaitStorePort(absl::Duration timeout) {
  absl::StatusOr<std::string> dir = ScratchDirOfChild();
  if (!dir.ok()) return dir.status();
  const std::string path = absl::StrCat(*dir, "/", kStorePortFile);
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    std::ifstream in(path);
    int port = 0;
    if (in && (in >> port) && port > 0) return port;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank 0 did not publish its store port in ", path, " within ",
          absl::FormatDuration(timeout),
          " (did it call PublishStorePort, e.g. as on_store_listening?)"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::StatusOr<std::vector<int>> RunRanks(int world_size,
                                          absl::Duration timeout,
                                          absl::string_view name,
                                          absl::string_view arg) {
  if (IsRankChild()) {
    return absl::FailedPreconditionError(
        "RunRanks called inside a rank child; rank mains must not nest");
  }
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size must be at least 1, got ", world_size));
  }
  if (FindRankMain(std::string(name)) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("no rank main \"", name,
                     "\" is registered; define it with "
                     "DCP_RANK_MAIN(",
                     name, ") in a file linked into this binary"));
  }

  // The binary to re-execute.
  std::error_code error;
  const std::string exe =
      std::filesystem::read_symlink("/proc/self/exe", error).string();
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot resolve /proc/self/exe: ", error.message()));
  }

  // A scratch folder shared by the ranks of this call.
  const char* tmp_root = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(
      (tmp_root != nullptr && tmp_root[0] != '\0') ? tmp_root : "/tmp",
      "/dcp_ranks_XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(ErrnoMessage(absl::StrCat("mkdtemp ", pattern)));
  }
  const std::string scratch_dir = pattern;

  std::vector<std::string> args = {exe};
  if (std::string filter = CurrentTestFilter(); !filter.empty()) {
    args.push_back(filter);
  }
  std::vector<char*> argv = CStrings(args);

  // Everything a child needs is prepared before fork(): between fork() and
  // execve() only async-signal-safe calls are allowed.
  std::vector<std::vector<std::string>> envs;
  std::vector<std::vector<char*>> envps;
  for (int rank = 0; rank < world_size; ++rank) {
    envs.push_back(ChildEnvironment(rank, world_size, name, arg, scratch_dir));
  }
  for (int rank = 0; rank < world_size; ++rank) {
    envps.push_back(CStrings(envs[rank]));
  }

  std::fflush(nullptr);
  const pid_t parent = getpid();
  std::vector<pid_t> pids(world_size, 0);
  std::vector<int> exit_codes(world_size, -1);
  absl::Status status;
  for (int rank = 0; rank < world_size; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      // Die with the test, never outlive it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      execve(argv[0], argv.data(), envps[rank].data());
      _exit(127);
    }
    if (pid < 0) {
      status = absl::InternalError(
          ErrnoMessage(absl::StrCat("fork for rank ", rank)));
      break;
    }
    pids[rank] = pid;
  }

  const absl::Time deadline = absl::Now() + timeout;
  while (status.ok()) {
    int running = 0;
    for (int rank = 0; rank < world_size; ++rank) {
      if (pids[rank] <= 0) continue;
      int wait_status = 0;
      const pid_t done = waitpid(pids[rank], &wait_status, WNOHANG);
      if (done == pids[rank]) {
        exit_codes[rank] = ExitCodeOf(wait_status);
        pids[rank] = 0;
      } else if (done < 0 && errno != EINTR) {
        status = absl::InternalError(
            ErrnoMessage(absl::StrCat("waitpid for rank ", rank)));
        break;
      } else {
        ++running;
      }
    }
    if (running == 0) break;
    if (absl::Now() >= deadline) {
      std::vector<int> hung;
      for (int rank = 0; rank < world_size; ++rank) {
        if (pids[rank] > 0) hung.push_back(rank);
      }
      status = absl::DeadlineExceededError(absl::StrCat(
          "rank main ", name, ": ranks {", absl::StrJoin(hung, ","), "} of ",
          world_size, " still ran after ", absl::FormatDuration(timeout),
          " and were killed (exit codes so "
          "far: ",
          absl::StrJoin(exit_codes, ","), "; -1 = killed)"));
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  KillAll(pids);
  std::filesystem::remove_all(scratch_dir, error);
  if (!status.ok()) return status;
  return exit_codes;
}

}  // namespace testing
}  // namespace dcp
