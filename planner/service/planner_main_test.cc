// Tests of the `dcp_planner` binary, run as a child process.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/client/planner_client.h"
#include "planner/service/port_file.h"

extern char** environ;

namespace dcp {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

/// A running dcp_planner whose stdout the test reads.
struct Child {
  pid_t pid = -1;
  int stdout_fd = -1;
};

Child Spawn(const std::vector<std::string>& flags) {
  std::vector<std::string> arguments = {Runfile("planner/service/dcp_planner")};
  arguments.insert(arguments.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);

  int pipe_fds[2];
  EXPECT_EQ(pipe(pipe_fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  Child child;
  EXPECT_EQ(
      posix_spawn(&child.pid, argv[0], &actions, nullptr, argv.data(), environ),
      0)
      << argv[0];
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  child.stdout_fd = pipe_fds[0];
  return child;
}

/// Reads the child's stdout up to the first newline (or EOF), waiting at most
/// `timeout`.
std::string ReadLine(const Child& child, absl::Duration timeout) {
  std::string line;
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    pollfd poll_fd{child.stdout_fd, POLLIN, 0};
    const int remaining_ms =
        static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (poll(&poll_fd, 1, std::max(remaining_ms, 1)) <= 0) continue;
    char c;
    if (read(child.stdout_fd, &c, 1) != 1) break;
    if (c == '\n') return line;
    line.push_back(c);
  }
  return line;
}

/// Reads all of the child's stdout.
std::string ReadAll(const Child& child) {
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = read(child.stdout_fd, buffer, sizeof(buffer))) > 0) {
    text.append(buffer, n);
  }
  return text;
}

/// The child's exit code, or nullopt if it had not exited (or died by a
/// signal) within `timeout`; then it is killed.
std::optional<int> WaitForExit(Child& child, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (absl::Now() < deadline) {
    const pid_t done = waitpid(child.pid, &status, WNOHANG);
    if (done == child.pid) {
      close(child.stdout_fd);
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return std::nullopt;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(child.pid, SIGKILL);
  waitpid(child.pid, &status, 0);
  close(child.stdout_fd);
  return std::nullopt;
}

TEST(PlannerMainTest, HelpPrintsUsageAndExitsZero) {
  Child child = Spawn({"--help"});
  const std::string usage = ReadAll(child);
  EXPECT_EQ(WaitForExit(child, absl::Seconds(10)), 0);
  EXPECT_THAT(usage, HasSubstr("Usage: dcp_planner"));
  EXPECT_THAT(usage, HasSubstr("--token-file"));
  EXPECT_THAT(usage, HasSubstr("--job-id"));
  EXPECT_THAT(usage, HasSubstr("--phased-plans"));
  EXPECT_THAT(usage, HasSubstr("--phased-min-gap"));
  EXPECT_THAT(usage, HasSubstr("at least 3%"));
}

TEST(PlannerMainTest, UnknownFlagExitsTwo) {
  Child child = Spawn({"--no-such-flag=1"});
  EXPECT_EQ(WaitForExit(child, absl::Seconds(10)), 2);
  Child bad_value = Spawn({"--nodes=zero"});
  EXPECT_EQ(WaitForExit(bad_value, absl::Seconds(10)), 2);
  Child bad_gap = Spawn({"--phased-plans", "--phased-min-gap=1.5"});
  EXPECT_EQ(WaitForExit(bad_gap, absl::Seconds(10)), 2);
  Child bad_warmup = Spawn({"--online-refit", "--refit-warmup-steps=-1"});
  EXPECT_EQ(WaitForExit(bad_warmup, absl::Seconds(10)), 2);
}

TEST(PlannerMainTest, PortOutOfRangeIsAUsageError) {
  // Port 70000 used to be truncated to 4464 and served there.
  Child child = Spawn({"--listen=127.0.0.1:70000", "--metrics-listen="});
  EXPECT_EQ(WaitForExit(child, absl::Seconds(10)), 2);
  Child metrics = Spawn({"--listen=127.0.0.1:0", "--metrics-listen=:99999"});
  EXPECT_EQ(WaitForExit(metrics, absl::Seconds(10)), 2);
}

TEST(PlannerMainTest, BadMemoryBudgetIsAUsageError) {
  // 1 byte and 63Mi are sizes, but too small for the planner to run in.
  for (const std::string budget :
       {"lots", "-1Gi", "12Q", "Mi", "1", "63Mi", "1e9"}) {
    Child child = Spawn({"--listen=127.0.0.1:0",
                         "--metrics-listen=", "--memory-budget=" + budget});
    EXPECT_EQ(WaitForExit(child, absl::Seconds(10)), 2) << budget;
  }
}

TEST(PlannerMainTest, ListeningBeyondLoopbackNeedsAToken) {
  // The default --listen is 0.0.0.0:50051; port 0 here.
  Child open = Spawn({"--listen=0.0.0.0:0", "--metrics-listen="});
  EXPECT_EQ(WaitForExit(open, absl::Seconds(10)), 2);
  // Refused as a usage error before binding (binding would fail, exit 1).
  Child other_host = Spawn({"--listen=192.0.2.1:0", "--metrics-listen="});
  EXPECT_EQ(WaitForExit(other_host, absl::Seconds(10)), 2);
  // Opting out explicitly, or listening on loopback, serves.
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--listen=0.0.0.0:0",
                                 "--allow-unauthenticated"},
        std::vector<std::string>{"--listen=127.0.0.1:0"},
        std::vector<std::string>{"--listen=[::1]:0"},
        // A fractional quantity is a size too.
        std::vector<std::string>{"--listen=127.0.0.1:0",
                                 "--memory-budget=1.5Gi"}}) {
    std::vector<std::string> all = flags;
    all.push_back("--metrics-listen=");
    Child child = Spawn(all);
    const std::string line = ReadLine(child, absl::Seconds(20));
    EXPECT_THAT(line, HasSubstr("dcp_planner listening on")) << flags[0];
    kill(child.pid, SIGTERM);
    EXPECT_EQ(WaitForExit(child, absl::Seconds(20)), 0) << flags[0];
  }
}

TEST(PlannerMainTest, AModelFileThatIsADeviceOrHugeIsRefusedUnread) {
  // /dev/zero never ends: read whole, it took 4 GB before failing.
  const std::string huge = TestTempPath("huge_model.json");
  WriteTestFile(huge, "{\"name\": \"");
  // Sparse: 2 GiB long and no disk used; read whole it holds 2 GiB.
  ASSERT_EQ(truncate(huge.c_str(), int64_t{2} << 30), 0);
  for (const std::string& model :
       {std::string("/dev/zero"), huge, ::testing::TempDir()}) {
    Child child = Spawn(
        {"--listen=127.0.0.1:0", "--metrics-listen=", "--model=" + model});
    EXPECT_EQ(WaitForExit(child, absl::Seconds(10)), 2) << model;
  }
}

TEST(PlannerMainTest, BadJobIdIsAUsageError) {
  Child child =
      Spawn({"--listen=127.0.0.1:0", "--metrics-listen=", "--job-id=train 7"});
  EXPECT_EQ(WaitForExit(child, absl::Seconds(10)), 2);
}

TEST(PlannerMainTest, RepeatedFlagIsAUsageError) {
  Child child = Spawn({"--nodes=1", "--nodes=2"});
  EXPECT_EQ(WaitForExit(child, absl::Seconds(10)), 2);
}

TEST(PlannerMainTest, ServesThenDrainsOnSigterm) {
  const std::string port_file = TestTempPath("planner_ports");
  Child child =
      Spawn({"--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
             "--nodes=2", "--gpus-per-node=4", "--liveness-timeout=30s",
             "--drain-timeout=2s", "--port-file=" + port_file});
  const std::string line = ReadLine(child, absl::Seconds(20));
  ASSERT_THAT(line, MatchesRegex("dcp_planner listening on 127\\.0\\.0\\.1:"
                                 "[0-9]+, metrics on 127\\.0\\.0\\.1:[0-9]+"))
      << line;
  const size_t port_start = line.find(':') + 1;
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      line.substr(port_start, line.find(',') - port_start), &port))
      << line;

  // The port file, written before the line, names the same port.
  absl::StatusOr<std::optional<PlannerPorts>> ports = ReadPortFile(port_file);
  ASSERT_TRUE(ports.ok()) << ports.status();
  ASSERT_TRUE(ports->has_value());
  EXPECT_EQ((*ports)->grpc_port, port);
  EXPECT_GT((*ports)->metrics_port, 0);

  GrpcPlannerClient::Options options;
  options.target = absl::StrCat("127.0.0.1:", port);
  options.retry.max_attempts = 1;
  absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> client =
      GrpcPlannerClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<v1::ListWorkersResponse> workers =
      (*client)->ListWorkers(v1::ListWorkersRequest());
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(workers->world_size(), 8);

  // The client stays connected, as workers do: gRPC's graceful shutdown
  // waits for the idle connection until the drain deadline at most.
  const absl::Time signalled = absl::Now();
  ASSERT_EQ(kill(child.pid, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(child, absl::Seconds(10)), 0);
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(5));
}

// A start that failed after opening the state directory (here: the port
// file cannot be written) used to leave its own job.pb, so the corrected
// command line was refused as "a different job".
TEST(PlannerMainTest, FailedStartLeavesNoJobRecord) {
  const std::string state_dir = FreshTestDirectory("state_");
  const std::string bad_port_file = TestTempPath("no_such_dir/ports");
  Child failed =
      Spawn({"--listen=127.0.0.1:0", "--metrics-listen=", "--nodes=2",
             "--state-dir=" + state_dir, "--port-file=" + bad_port_file});
  EXPECT_EQ(WaitForExit(failed, absl::Seconds(20)), 1);
  EXPECT_FALSE(std::filesystem::exists(state_dir + "/job.pb"));

  // The corrected command line (another --nodes, a good port file) starts.
  const std::string port_file = TestTempPath("failed_start_ports");
  Child fixed = Spawn({"--listen=127.0.0.1:0", "--metrics-listen=", "--nodes=4",
                       "--state-dir=" + state_dir, "--port-file=" + port_file});
  EXPECT_THAT(ReadLine(fixed, absl::Seconds(20)),
              HasSubstr("dcp_planner listening on"));
  kill(fixed.pid, SIGTERM);
  EXPECT_EQ(WaitForExit(fixed, absl::Seconds(20)), 0);
  // A planner that started claims the directory for its job.
  EXPECT_TRUE(std::filesystem::exists(state_dir + "/job.pb"));
  Child other = Spawn({"--listen=127.0.0.1:0", "--metrics-listen=", "--nodes=2",
                       "--state-dir=" + state_dir});
  EXPECT_EQ(WaitForExit(other, absl::Seconds(20)), 1);
}

TEST(PlannerMainTest, SigtermDoesNotWaitForALongPlan) {
  // 2^20 sequences on 4,096 GPUs: planning takes tens of seconds (45 s
  // measured on 2 cores), far beyond the drain timeout.
  const std::string port_file = TestTempPath("planner_ports_long_plan");
  Child child =
      Spawn({"--listen=127.0.0.1:0", "--metrics-listen=", "--nodes=512",
             "--gpus-per-node=8", "--drain-timeout=1s", "--memory-budget=768Mi",
             "--port-file=" + port_file});
  ReadLine(child, absl::Seconds(20));
  absl::StatusOr<std::optional<PlannerPorts>> ports = ReadPortFile(port_file);
  ASSERT_TRUE(ports.ok()) << ports.status();
  ASSERT_TRUE(ports->has_value());
  GrpcPlannerClient::Options options;
  options.target = absl::StrCat("127.0.0.1:", (*ports)->grpc_port);
  options.retry.max_attempts = 1;
  options.call_deadline = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> client =
      GrpcPlannerClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  // Only a registered worker's batches are taken.
  v1::RegisterWorkerRequest worker;
  worker.set_worker_id("w0");
  worker.set_node_name("n0");
  worker.set_num_ranks(1);
  ASSERT_TRUE((*client)->RegisterWorker(worker).ok());
  v1::SubmitBatchesRequest request;
  request.set_worker_id("w0");
  v1::GlobalBatch* batch = request.add_batches();
  batch->set_step(0);
  for (int64_t i = 0; i < (int64_t{1} << 20); ++i) {
    v1::Sample* sample = batch->add_samples();
    sample->set_id(i);
    sample->set_length_tokens(100 + (i * 7919) % 4000);
  }
  absl::StatusOr<v1::SubmitBatchesResponse> submitted =
      (*client)->SubmitBatches(request);
  ASSERT_TRUE(submitted.ok()) << submitted.status();

  ASSERT_EQ(kill(child.pid, SIGTERM), 0);
  // The bound only fails the test instead of waiting for the plan; the
  // planner exits about when the 1 s drain ends.
  EXPECT_EQ(WaitForExit(child, absl::Seconds(20)), 0);
}

}  // namespace
}  // namespace dcp
