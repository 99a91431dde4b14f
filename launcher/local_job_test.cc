// dcp_local_job end to end on loopback: the real dcp_planner and dcp_worker
// processes of a world of two ranks. A tiny scenario (profile, dcp plans,
// bucket plans, the report), checkpoint + resume against an uninterrupted
// run, SIGTERM to every worker mid-run, the planner killed and restarted,
// and phased plans against one-layout plans of the same batches.

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/local_job_test_support.h"
#include "worker/run_summary.h"

namespace dcp {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string TestDir(const std::string& name) {
  return EmptyTestDirectory(absl::StrCat("local_job_test_", name));
}

/// The dcp run's summary in `dir` (an empty one, with a failure, when it
/// cannot be read).
RunSummary Summary(const std::string& dir) {
  absl::StatusOr<RunSummary> summary =
      ReadRunSummary(absl::StrCat(dir, "/dcp_summary.json"));
  EXPECT_TRUE(summary.ok()) << summary.status();
  return summary.ok() ? *std::move(summary) : RunSummary();
}

/// The flags of a reproducible run: no profile (measured samples differ
/// between runs) and no online refit (it follows measured times), so the
/// planner's plans depend on the batches only.
std::vector<std::string> Reproducible(int steps) {
  return {absl::StrCat("--steps=", steps), "--profile=false",
          "--online-refit=false", "--compare-bucket=false",
          "--compare-peers="};
}

/// Expects `resumed`'s steps to have the plans and losses of the same steps
/// of `whole`.
void ExpectSameSteps(const RunSummary& whole, const RunSummary& resumed) {
  for (const StepRecord& step : resumed.steps) {
    const int index = static_cast<int>(step.step);
    ASSERT_LT(index, static_cast<int>(whole.steps.size()));
    const StepRecord& expected = whole.steps[index];
    EXPECT_EQ(step.plan_shape, expected.plan_shape) << "step " << index;
    EXPECT_EQ(step.sp_sizes, expected.sp_sizes) << "step " << index;
    EXPECT_EQ(step.loss, expected.loss) << "step " << index;
  }
}

/// The summary of an uninterrupted reproducible 4-step run (made once).
const RunSummary& UninterruptedFourSteps() {
  static const RunSummary* const summary = [] {
    const std::string dir = TestDir("whole");
    const JobRun run = RunLocalJob(dir, Reproducible(4));
    EXPECT_EQ(run.exit_code, 0) << run.output;
    return new RunSummary(run.exit_code == 0 ? Summary(dir) : RunSummary());
  }();
  return *summary;
}

TEST(LocalJobTest, ProfilesRunsDcpThenThePeersAndReports) {
  const std::string dir = TestDir("tiny");
  const JobRun run = RunLocalJob(dir, {"--steps=3"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.lines, Contains(StartsWith("[dcp_local_job] dcp_planner on "
                                             "127.0.0.1:")));
  EXPECT_THAT(run.lines,
              Contains(StartsWith("profile: 2 ranks submitted their samples")));
  EXPECT_THAT(run.lines, Contains(StartsWith("  fit gemm: ")));
  int step_lines = 0;
  for (const std::string& line : run.lines) {
    if (absl::StartsWith(line, "step ")) {
      ++step_lines;
      // One layout, or phases (dcp's re-grouping, megatron-dyncp's rounds).
      EXPECT_THAT(line, testing::MatchesRegex(
                            "step [0-2]: plan (phases [0-9]+: (.* then )?)?"
                            "SP\\[[0-9,]+\\] mb\\[[0-9,]+\\] "
                            "recompute\\[[-0-9,]+\\] \\| predicted [0-9.]+ s "
                            "measured [0-9.]+ s \\| loss [0-9.]+"));
    }
  }
  // 3 steps each of dcp, bucket, best-static and megatron-dyncp.
  EXPECT_EQ(step_lines, 12) << run.output;
  EXPECT_THAT(run.lines, Contains(StartsWith("== bucket: the same 3 batches")));
  EXPECT_THAT(run.lines,
              Contains(StartsWith("== megatron-dyncp: the same 3 batches")));
  for (const std::string peer : {"bucket", "best-static", "megatron-dyncp"}) {
    EXPECT_THAT(run.lines, Contains(StartsWith(absl::StrCat(
                               "measured speedup dcp vs ", peer, ": "))));
    // The same gradients whatever the plan: the losses agree to rounding.
    bool agreed = false;
    const std::string prefix = absl::StrCat(
        "same batches, same model: max |loss dcp - loss ", peer, "| = ");
    for (const std::string& line : run.lines) {
      if (!absl::StartsWith(line, prefix)) continue;
      agreed = std::stod(line.substr(prefix.size())) < 1e-5;
    }
    EXPECT_TRUE(agreed) << peer << "\n" << run.output;
  }
  EXPECT_THAT(run.lines, Contains(StartsWith("cost model error (dcp): ")));
  const RunSummary summary = Summary(dir);
  EXPECT_EQ(summary.world_size, 2);
  EXPECT_EQ(summary.steps.size(), 3u);
  // Every registration carried the launcher's job id.
  const std::string log_text = ReadTestFile(absl::StrCat(dir, "/planner.log"));
  // (Either worker may register first and get rank 0.)
  for (const std::string worker : {"w0", "w1"}) {
    EXPECT_THAT(log_text,
                testing::ContainsRegex(absl::StrCat(
                    "worker ", worker,
                    " on node node0 \\(slot 0\\): ranks [01]\\.\\.[01]; "
                    "job dcp-local-job, registered by ")));
  }
}

TEST(LocalJobTest, ResumedJobMatchesAnUninterruptedOne) {
  const RunSummary& expected = UninterruptedFourSteps();
  ASSERT_EQ(expected.steps.size(), 4u);

  const std::string checkpoints = TestDir("checkpoints");
  std::vector<std::string> first_flags = Reproducible(2);
  first_flags.push_back(absl::StrCat("--checkpoint-dir=", checkpoints));
  const std::string first_dir = TestDir("first_half");
  const JobRun first = RunLocalJob(first_dir, first_flags);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(std::filesystem::exists(checkpoints + "/checkpoint.pt"));
  ExpectSameSteps(expected, Summary(first_dir));

  std::vector<std::string> second_flags = Reproducible(4);
  second_flags.push_back(absl::StrCat("--checkpoint-dir=", checkpoints));
  second_flags.push_back("--resume");
  const std::string second_dir = TestDir("second_half");
  const JobRun second = RunLocalJob(second_dir, second_flags);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_THAT(second.lines, Contains(HasSubstr("at step 2")));
  const RunSummary resumed = Summary(second_dir);
  EXPECT_EQ(resumed.first_step, 2);
  ASSERT_EQ(resumed.steps.size(), 2u);
  ExpectSameSteps(expected, resumed);
}

TEST(LocalJobTest, SigtermStopsEveryRankAtOneStepBoundaryWithACheckpoint) {
  const std::string checkpoints = TestDir("sigterm_checkpoints");
  const RunSummary& expected = UninterruptedFourSteps();
  ASSERT_EQ(expected.steps.size(), 4u);
  std::vector<std::string> flags = Reproducible(4);
  flags.push_back(absl::StrCat("--checkpoint-dir=", checkpoints));
  flags.push_back("--sigterm-after-step=0");
  const std::string dir = TestDir("sigterm");
  const JobRun run = RunLocalJob(dir, flags);
  // Every worker exited 0 (the launcher fails on any other exit code).
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.lines,
              Contains(HasSubstr("sending SIGTERM to the 2 workers")));
  EXPECT_THAT(
      run.lines,
      Contains(HasSubstr("every worker exited 0 at the step boundary")));
  const RunSummary summary = Summary(dir);
  EXPECT_TRUE(summary.stopped_on_request);
  const int stopped_before = static_cast<int>(summary.next_step);
  EXPECT_GE(stopped_before, 1);
  EXPECT_LT(stopped_before, 4) << run.output;
  EXPECT_TRUE(std::filesystem::exists(checkpoints + "/checkpoint.pt"));

  // The checkpoint continues the run where it stopped, as if uninterrupted.
  std::vector<std::string> resume_flags = Reproducible(4);
  resume_flags.push_back(absl::StrCat("--checkpoint-dir=", checkpoints));
  resume_flags.push_back("--resume");
  const std::string resumed_dir = TestDir("sigterm_resumed");
  const JobRun resumed = RunLocalJob(resumed_dir, resume_flags);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const RunSummary after = Summary(resumed_dir);
  EXPECT_EQ(after.first_step, stopped_before);
  EXPECT_EQ(after.next_step, 4);
  ExpectSameSteps(expected, summary);
  ExpectSameSteps(expected, after);
}

/// The planner is SIGKILLed after step 0 and restarted 6 s later: longer
/// than the workers' 5 attempts survive (0.2 + 0.4 + 0.8 + 1.6 s of backoff,
/// +-20%), shorter than the 30 s of a pod restart to keep the test quick.
std::vector<std::string> PlannerKilledAfterStepZero() {
  std::vector<std::string> flags = Reproducible(4);
  flags.push_back("--restart-planner-after-step=0");
  flags.push_back("--planner-stop-signal=KILL");
  flags.push_back("--planner-down-for=6s");
  return flags;
}

TEST(LocalJobTest, WorkersRideThroughAPlannerKilledAndRestartedLater) {
  const RunSummary& expected = UninterruptedFourSteps();
  ASSERT_EQ(expected.steps.size(), 4u);
  std::vector<std::string> flags = PlannerKilledAfterStepZero();
  flags.push_back("--planner-outage-tolerance=2m");
  const std::string dir = TestDir("planner_killed");
  const JobRun run = RunLocalJob(dir, flags);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.lines, Contains(HasSubstr("planner drill: sending SIGKILL")));
  EXPECT_THAT(run.lines,
              Contains(HasSubstr("dcp_planner exited with code 137")));
  EXPECT_THAT(run.lines, Contains(HasSubstr("dcp_planner restarted")));
  const RunSummary summary = Summary(dir);
  EXPECT_EQ(summary.first_step, 0);
  ASSERT_EQ(summary.steps.size(), 4u) << run.output;
  ExpectSameSteps(expected, summary);
  // A worker said that it waited, and for whom (the one whose call met
  // the outage; a peer that had its plan waits for it in a collective).
  const std::string logs = absl::StrCat(ReadTestFile(dir + "/dcp-w0.log"),
                                        ReadTestFile(dir + "/dcp-w1.log"));
  EXPECT_THAT(logs, HasSubstr("unavailable for 0.0 s (attempt 1); waiting "
                              "for it (gives up after 5 attempts and 2m)"));
  EXPECT_THAT(logs, HasSubstr("answered again ("));
}

TEST(LocalJobTest, WithoutOutageToleranceThePlannerRestartFailsTheJob) {
  // The same drill with --rpc-attempts alone: the outage outlasts them.
  std::vector<std::string> flags = PlannerKilledAfterStepZero();
  flags.push_back("--planner-outage-tolerance=0");
  const std::string dir = TestDir("planner_killed_no_tolerance");
  const JobRun run = RunLocalJob(dir, flags);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  // A rank gave up on the planner. Which rank's failure the launcher names
  // is a race (the other may fail in a collective as its peer exits), so
  // the ranks' own logs are read.
  EXPECT_THAT(absl::StrCat(ReadTestFile(absl::StrCat(dir, "/dcp-w0.log")),
                           ReadTestFile(absl::StrCat(dir, "/dcp-w1.log"))),
              HasSubstr("unavailable after 5 attempts"))
      << run.output;
}

/// A reproducible 4-step run whose batches hold sequences of 1024-2048
/// tokens (which need SP 2 in the default rank memory) among short ones:
/// the planner's phased plans (SP 2 for the long ones, then two SP 1
/// groups for the short ones) pay there.
std::vector<std::string> LongAmongShort() {
  std::vector<std::string> flags = Reproducible(4);
  flags.push_back(
      "--workload=longtail:median=64,tail_fraction=0.05,tail_min=1024,"
      "max=2048,min=16");
  flags.push_back("--global-batch-tokens=4096");
  return flags;
}

TEST(LocalJobTest, PhasedPlansTrainTheSameBatchesToTheSameLosses) {
  const std::string plain_dir = TestDir("one_layout");
  std::vector<std::string> plain_flags = LongAmongShort();
  plain_flags.push_back("--phased-plans=false");
  const JobRun plain = RunLocalJob(plain_dir, plain_flags);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  std::vector<std::string> flags = LongAmongShort();
  flags.push_back("--phased-plans");
  flags.push_back("--phased-min-gap=0");  // Try phases for every batch.
  const std::string phased_dir = TestDir("phased");
  const JobRun phased = RunLocalJob(phased_dir, flags);
  ASSERT_EQ(phased.exit_code, 0) << phased.output;
  EXPECT_THAT(phased.lines, Contains(testing::MatchesRegex(
                                "step [0-3]: plan phases 2: SP\\[2\\] .* then "
                                "SP\\[1,1\\] .*")))
      << phased.output;

  const RunSummary one_layout = Summary(plain_dir);
  const RunSummary summary = Summary(phased_dir);
  ASSERT_EQ(one_layout.steps.size(), 4u);
  ASSERT_EQ(summary.steps.size(), 4u);
  int phased_steps = 0;
  int a_phased_step = -1;
  for (int i = 0; i < 4; ++i) {
    const StepRecord& step = summary.steps[i];
    EXPECT_THAT(one_layout.steps[i].plan_shape,
                testing::Not(StartsWith("phases")));
    if (absl::StartsWith(step.plan_shape, "phases 2: ")) {
      ++phased_steps;
      a_phased_step = i;
    }
    // The same samples, summed in another order by other groups.
    EXPECT_NEAR(step.loss, one_layout.steps[i].loss,
                1e-5 * one_layout.steps[i].loss)
        << "step " << i << ": " << step.plan_shape << " vs "
        << one_layout.steps[i].plan_shape;
  }
  EXPECT_GE(phased_steps, 1) << phased.output;
  // The cost-model breakdown covers the one-layout steps.
  EXPECT_THAT(phased.lines,
              Contains(testing::ContainsRegex(
                  "step\\(s\\) of phases left out\\) cost-model breakdown")))
      << phased.output;
  // The measured timeline of a step of phases is not drawn, saying why;
  // the job still succeeds.
  ASSERT_GE(a_phased_step, 0);
  flags.push_back(absl::StrCat("--timeline-step=", a_phased_step));
  const JobRun drawn = RunLocalJob(TestDir("phased_timeline"), flags);
  EXPECT_EQ(drawn.exit_code, 0) << drawn.output;
  EXPECT_THAT(drawn.output, HasSubstr("ran a plan of phases, and the measured "
                                      "timeline draws plans of one layout"));
}

TEST(LocalJobTest, UsageErrorsExitTwo) {
  const std::string dir = TestDir("usage");
  EXPECT_EQ(RunLocalJob(dir, {"--no-such-flag"}).exit_code, 2);
  EXPECT_EQ(RunLocalJob(dir, {"--resume"}).exit_code, 2);
  EXPECT_EQ(RunLocalJob(dir, {"--planner-stop-signal=HUP"}).exit_code, 2);
  EXPECT_EQ(
      RunLocalJob(dir, {"--phased-plans", "--phased-min-gap=-1"}).exit_code, 2);
  EXPECT_EQ(RunLocalJob(dir, {"--compare-peers=dcp"}).exit_code, 2);
  EXPECT_EQ(RunLocalJob(dir, {"--compare-peers=bucket"}).exit_code, 2);
}

}  // namespace
}  // namespace dcp
