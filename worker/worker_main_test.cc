// `dcp_worker` as a child process: --help, usage errors, a planner that
// cannot be reached (the client's retries, then a clear error and exit 1),
// and a peer that registered and went silent (named after --join-timeout).

#include <csignal>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/free_port.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/child_process.h"
#include "launcher/planner_port.h"
#include "planner/client/planner_client.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

struct WorkerRun {
  int exit_code = -1;
  std::string stdout_text;
  std::string stderr_text;
};

WorkerRun RunWorker(const std::vector<std::string>& flags,
                    const std::vector<std::string>& environment = {}) {
  std::vector<std::string> argv = {Runfile("worker/dcp_worker")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const std::string stderr_path = TestTempPath("worker_main_test.stderr");
  std::filesystem::remove(stderr_path);
  auto mutex = std::make_shared<absl::Mutex>();
  auto lines = std::make_shared<std::vector<std::string>>();
  absl::StatusOr<std::unique_ptr<ChildProcess>> worker = ChildProcess::Start(
      argv, stderr_path,
      [mutex, lines](const std::string& line) {
        absl::MutexLock lock(mutex.get());
        lines->push_back(line);
      },
      environment);
  WorkerRun run;
  if (!worker.ok()) {
    run.stderr_text = std::string(worker.status().message());
    return run;
  }
  std::optional<int> code = (*worker)->WaitFor(absl::Seconds(60));
  run.exit_code = code.has_value() ? *code : (*worker)->Kill();
  (*worker)->JoinOutput();
  absl::MutexLock lock(mutex.get());
  run.stdout_text = absl::StrJoin(*lines, "\n");
  run.stderr_text = ReadTestFile(stderr_path);
  return run;
}

TEST(WorkerMainTest, HelpListsTheFlags) {
  const WorkerRun run = RunWorker({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(
      run.stdout_text,
      AllOf(HasSubstr("--planner=HOST:PORT"), HasSubstr("DCP_PLANNER_ADDRESS"),
            HasSubstr("--token-file=FILE"),
            HasSubstr("--plan-source=planner|STRATEGY"),
            HasSubstr("--checkpoint-every=K"),
            HasSubstr("--precision=fp32|bf16"), HasSubstr("--zero1"),
            HasSubstr("--max-cached-groups=N"),
            HasSubstr("--metrics-listen=HOST:PORT"),
            HasSubstr("--job-id=ID"), HasSubstr("DCP_JOB_ID")));
}

TEST(WorkerMainTest, UsageErrorsExitTwo) {
  // Each case: the flags, and what the error says.
  const std::vector<std::pair<std::vector<std::string>, std::string>> usage = {
      {{"--steps=3"}, "no planner address"},
      {{"--planner=127.0.0.1:1", "--no-such-flag"},
       "unknown flag --no-such-flag"},
      {{"--planner=127.0.0.1:1", "--resume"}, "need --checkpoint-dir"},
      {{"--planner=127.0.0.1:1", "--plan-source=static"},
       "expected planner or a peer strategy (bucket"},
      {{"--planner=127.0.0.1:1", "--plan-source=dcp"}, "megatron-dyncp"},
      {{"--planner=127.0.0.1:1", "--precision=fp16"},
       "--precision=fp16: expected fp32 or bf16"},
      {{"--planner=127.0.0.1:1", "--max-cached-groups=-1"},
       "max-cached-groups"},
  };
  for (const auto& [flags, says] : usage) {
    const WorkerRun run = RunWorker(flags);
    EXPECT_EQ(run.exit_code, 2) << says;
    EXPECT_THAT(run.stderr_text, HasSubstr(says));
  }
}

TEST(WorkerMainTest, BadWorkloadOrDataFlagsExitTwoBeforeRegistering) {
  // Nothing listens on the planner's port: a worker that registered first
  // would fail with UNAVAILABLE (exit 1) instead of naming the flag.
  const std::string planner =
      absl::StrCat("--planner=127.0.0.1:", *PickFreePort("127.0.0.1"));
  const std::vector<std::vector<std::string>> bad = {
      {"--workload=longtail:median=64,max=oops", "--workload=longtail"},
      {"--workload=gaussian", "--workload=gaussian"},
      {"--workload=file:/no/such/lengths", "/no/such/lengths"},
      {"--workload=uniform:min=30,max=20", "--workload=uniform"},
      {"--data=tokens:/no/such/prefix", "--data=tokens:/no/such/prefix"},
      {"--data=synthetic:seven", "--data=synthetic:seven"},
      {"--data=parquet:x", "--data=parquet:x"},
  };
  for (const std::vector<std::string>& flag_and_text : bad) {
    const WorkerRun run =
        RunWorker({planner, "--rpc-attempts=1", flag_and_text[0]});
    EXPECT_EQ(run.exit_code, 2) << flag_and_text[0] << "\n" << run.stderr_text;
    EXPECT_THAT(run.stderr_text, HasSubstr(flag_and_text[1]))
        << flag_and_text[0];
    EXPECT_THAT(run.stderr_text, Not(HasSubstr("registering")))
        << flag_and_text[0];
  }
}

TEST(WorkerMainTest, UnreachablePlannerFailsAfterRetriesWithAClearError) {
  // A free loopback port: nothing listens. The address comes from the
  // environment, as in a Kubernetes pod.
  const int port = *PickFreePort("127.0.0.1");
  const WorkerRun run = RunWorker(
      {"--rpc-attempts=2", "--rpc-timeout=2s", "--store-host=127.0.0.1",
       "--planner-outage-tolerance=0"},
      {absl::StrCat("DCP_PLANNER_ADDRESS=127.0.0.1:", port),
       "DCP_WORKER_ID=worker-7"});
  EXPECT_EQ(run.exit_code, 1) << run.stderr_text;
  EXPECT_THAT(run.stderr_text,
              AllOf(HasSubstr("dcp_worker worker-7: error: UNAVAILABLE"),
                    HasSubstr("registering worker \"worker-7\""),
                    HasSubstr("unavailable after 2 attempts")));
}

TEST(WorkerMainTest, WaitsForAnUnreachablePlannerUpToTheOutageTolerance) {
  const int port = *PickFreePort("127.0.0.1");
  const WorkerRun run = RunWorker(
      {absl::StrCat("--planner=127.0.0.1:", port), "--worker-id=worker-8",
       "--rpc-attempts=2", "--planner-outage-tolerance=4s",
       "--store-host=127.0.0.1"});
  EXPECT_EQ(run.exit_code, 1) << run.stderr_text;
  EXPECT_THAT(run.stderr_text,
              AllOf(HasSubstr(absl::StrCat("dcp_worker worker-8: "
                                           "RegisterWorker: planner at "
                                           "127.0.0.1:",
                                           port, " unavailable for 0.0 s")),
                    HasSubstr("waiting for it (gives up after 2 attempts "
                              "and 4s)"),
                    HasSubstr(" attempts over ")));
  // More attempts than --rpc-attempts: the 4 s of outage bound them.
  EXPECT_THAT(run.stderr_text, Not(HasSubstr("unavailable after 2 attempts")));
}

// SIGTERM while the worker waits for an unreachable planner (5 minutes of
// tolerance): it stops waiting at once and exits 0 saying so, instead of
// riding out the tolerance.
TEST(WorkerMainTest, SigtermEndsTheWaitForAnUnreachablePlanner) {
  const int port = *PickFreePort("127.0.0.1");
  const std::string stderr_path = TestTempPath("worker_sigterm.stderr");
  std::filesystem::remove(stderr_path);
  absl::StatusOr<std::unique_ptr<ChildProcess>> worker = ChildProcess::Start(
      {Runfile("worker/dcp_worker"), absl::StrCat("--planner=127.0.0.1:", port),
       "--worker-id=worker-9", "--rpc-attempts=2",
       "--planner-outage-tolerance=5m", "--store-host=127.0.0.1"},
      stderr_path, [](const std::string&) {}, {});
  ASSERT_TRUE(worker.ok()) << worker.status();
  const auto read_stderr = [&] { return ReadTestFile(stderr_path); };
  // Waits (for at most a minute) until the worker logs that it waits.
  for (int i = 0; i < 600 && read_stderr().find("waiting for it") ==
                                 std::string::npos;
       ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_THAT(read_stderr(), HasSubstr("waiting for it"));
  (*worker)->Signal(SIGTERM);
  std::optional<int> code = (*worker)->WaitFor(absl::Seconds(60));
  const int exit_code = code.has_value() ? *code : (*worker)->Kill();
  (*worker)->JoinOutput();
  EXPECT_EQ(exit_code, 0) << read_stderr();
  EXPECT_THAT(read_stderr(),
              AllOf(HasSubstr("dcp_worker worker-9: stopped on request: "),
                    HasSubstr("RegisterWorker: stopped on request while "
                              "waiting for the planner at 127.0.0.1:")));
}

TEST(WorkerMainTest, APeerThatRegisteredAndWentSilentIsNamedAfterTheJoinTimeout) {
  const std::string directory = EmptyTestDirectory("silent_peer");
  const std::string port_file = directory + "/ports";
  absl::StatusOr<std::unique_ptr<ChildProcess>> planner = ChildProcess::Start(
      {Runfile("planner/service/dcp_planner"), "--listen=127.0.0.1:0",
       "--metrics-listen=", "--port-file=" + port_file,
       "--state-dir=" + directory + "/state", "--model=tiny", "--nodes=2",
       "--gpus-per-node=1"},
      directory + "/planner.log", [](const std::string&) {}, {});
  ASSERT_TRUE(planner.ok()) << planner.status();
  absl::StatusOr<int> port = WaitForPlannerPort(
      **planner, port_file, absl::Now() + absl::Minutes(1), {});
  ASSERT_TRUE(port.ok()) << port.status();
  // A registration that never calls again (a crashed worker, or not a
  // worker at all) takes rank 0.
  GrpcPlannerClient::Options options;
  options.target = absl::StrCat("127.0.0.1:", *port);
  absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> client =
      GrpcPlannerClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  v1::RegisterWorkerRequest ghost;
  ghost.set_worker_id("ghost");
  ghost.set_node_name("ghost-node");
  ghost.set_num_ranks(1);
  ghost.set_address("127.0.0.1:1");
  ghost.set_backend("gloo");
  ASSERT_TRUE((*client)->RegisterWorker(ghost).ok());

  const absl::Time start = absl::Now();
  const WorkerRun run = RunWorker(
      {absl::StrCat("--planner=127.0.0.1:", *port), "--worker-id=worker-1",
       "--node-name=node-1", "--backend=gloo", "--store-host=127.0.0.1",
       "--join-timeout=2s"});
  const absl::Duration took = absl::Now() - start;
  (*planner)->Stop(absl::Seconds(10));
  (*planner)->JoinOutput();
  EXPECT_EQ(run.exit_code, 1) << run.stderr_text;
  EXPECT_THAT(run.stderr_text,
              AllOf(HasSubstr("not every worker joined within 2s"),
                    HasSubstr("'ghost' (rank 0, silent for"),
                    HasSubstr("restart it with the same worker id")));
  // Named after the join timeout, not after a c10d store timeout (60 s).
  EXPECT_LT(took, absl::Seconds(30)) << run.stderr_text;
}

}  // namespace
}  // namespace dcp
