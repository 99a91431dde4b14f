// JobSummaryLines on hand-made runs: the figures it derives (means, speedups
// with and without step 0, loss agreement) and the runs it leaves out.

#include "launcher/job_summary.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/run_summary.h"

namespace dcp {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A run whose step i measured measured[i] s against predicted[i] s and
// ended with loss[i].
RunSummary RunOf(const std::vector<double>& measured,
                 const std::vector<double>& predicted,
                 const std::vector<double>& loss) {
  RunSummary run;
  for (size_t i = 0; i < measured.size(); ++i) {
    StepRecord step;
    step.step = static_cast<int64_t>(i);
    step.measured_seconds = measured[i];
    step.predicted_seconds = predicted[i];
    step.loss = loss[i];
    run.steps.push_back(step);
  }
  return run;
}

TEST(JobSummaryLinesTest, SaysSoWhenDcpRanNoStep) {
  EXPECT_THAT(JobSummaryLines(RunSummary(), {{"bucket", RunOf({1}, {1}, {1})}}),
              ElementsAre("", "== summary ==", "no dcp steps ran"));
}

TEST(JobSummaryLinesTest, ComparesDcpWithEachPeerThatRan) {
  const RunSummary dcp = RunOf({2, 1, 1}, {1, 1, 1}, {1.0, 0.9, 0.8});
  const std::vector<PeerRun> peers = {
      {"bucket", RunOf({4, 3, 3}, {2, 2, 2}, {1.0, 0.9, 0.3})},
      {"idle-peer", RunSummary()}};
  const std::vector<std::string> lines = JobSummaryLines(dcp, peers);
  EXPECT_THAT(lines, Contains("dcp    (3 steps): mean step 1.333 s measured, "
                              "1.000 s predicted (without step 0: 1.000 s "
                              "measured)"));
  EXPECT_THAT(lines, Contains("bucket (3 steps): mean step 3.333 s measured, "
                              "2.000 s predicted (without step 0: 3.000 s "
                              "measured)"));
  EXPECT_THAT(lines, Contains("measured speedup dcp vs bucket: 2.50x (without "
                              "step 0: 3.00x); predicted 2.00x"));
  EXPECT_THAT(lines, Contains("same batches, same model: max |loss dcp - loss "
                              "bucket| = 0.5 over 3 steps"));
  // dcp's error: step 0 is 50% off, the others exact.
  EXPECT_THAT(lines, Contains("cost model error (dcp): mean |predicted - "
                              "measured| / measured = 16.7% over 3 steps "
                              "(0.0% without step 0)"));
  EXPECT_THAT(lines, Contains(HasSubstr("cost model error (bucket): median")));
  for (const std::string& line : lines) {
    EXPECT_THAT(line, Not(HasSubstr("idle-peer")));
  }
}

TEST(JobSummaryLinesTest, LossesAreComparedOverTheStepsBothRan) {
  const RunSummary dcp = RunOf({1, 1}, {1, 1}, {2.0, 1.0});
  const std::vector<PeerRun> peers = {
      {"packed", RunOf({1, 1, 1}, {1, 1, 1}, {2.0, 1.25, 9.0})}};
  EXPECT_THAT(JobSummaryLines(dcp, peers),
              Contains("same batches, same model: max |loss dcp - loss "
                       "packed| = 0.25 over 2 steps"));
}

}  // namespace
}  // namespace dcp
