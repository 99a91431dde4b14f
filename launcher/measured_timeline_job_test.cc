// dcp_local_job --timeline-step on a short real job (the real dcp_planner
// and two dcp_worker processes on loopback): the SVG's measured bars are the
// times the workers recorded, and both runs print their cost-model
// breakdown; `dcp timeline` over the planner's state directory draws the
// same bars from the ranks' reports.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/local_job_test_support.h"
#include "planner/simulate/markup_test_util.h"
#include "worker/step_timing_files.h"

namespace dcp {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

/// The measured bars of a timeline row, in order.
std::vector<xmlNode*> MeasuredBarsOfRow(xmlNode* row) {
  std::vector<xmlNode*> bars;
  for (xmlNode* child = row->children; child != nullptr; child = child->next) {
    if (child->type == XML_ELEMENT_NODE &&
        Attribute(child, "class") == "measured") {
      bars.push_back(child);
    }
  }
  return bars;
}

/// Each row's measured bars' seconds, by the row's data-ranks.
std::map<std::string, std::vector<double>> MeasuredBars(
    const MarkupDocument& svg) {
  std::map<std::string, std::vector<double>> bars;
  for (xmlNode* row : svg.Select("//*[local-name()='g'][@class='row']")) {
    std::vector<double>& seconds = bars[Attribute(row, "data-ranks")];
    for (xmlNode* bar : MeasuredBarsOfRow(row)) {
      seconds.push_back(NumberAttribute(bar, "data-duration-seconds"));
    }
  }
  return bars;
}

TEST(MeasuredTimelineJobTest, TheSvgShowsWhatTheWorkersRecorded) {
  const std::string dir = EmptyTestDirectory("measured_timeline_job");
  const std::string svg_path = absl::StrCat(dir, "/step1.svg");
  const JobRun run = RunLocalJob(
      dir, {"--steps=3", "--profile=false", "--compare-peers=best-static",
            "--timeline-step=1", absl::StrCat("--timeline-out=", svg_path),
            absl::StrCat("--planner-state-dir=", dir, "/planner_state")});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(
      run.lines,
      Contains(HasSubstr("dcp (steps 1-2) cost-model breakdown over 2 steps")))
      << run.output;
  EXPECT_THAT(run.lines,
              Contains(HasSubstr(
                  "bucket (steps 1-2) cost-model breakdown over 2 steps")))
      << run.output;
  EXPECT_THAT(run.lines,
              Contains(HasSubstr(
                  "best-static (steps 1-2) cost-model breakdown over 2 steps")))
      << run.output;
  EXPECT_THAT(run.lines, Contains(HasSubstr("  compute     median")))
      << run.output;

  // What the workers recorded of step 1, per rank.
  const std::string timing_dir =
      StepTimingDir(absl::StrCat(dir, "/dcp_summary.json"));
  std::vector<RankStepTiming> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    absl::StatusOr<RankStepTiming> timing =
        ReadRankStepTiming(timing_dir, 1, rank);
    ASSERT_TRUE(timing.ok()) << timing.status();
    ranks.push_back(*timing);
  }

  for (const std::string& path :
       {svg_path, absl::StrCat(dir, "/step1.bucket.svg")}) {
    SCOPED_TRACE(path);
    const MarkupDocument svg = MarkupDocument::ParseXml(ReadTestFile(path));
    ASSERT_NE(svg.doc, nullptr) << "not well-formed XML";
    EXPECT_EQ(Attribute(svg.Select("/*")[0], "data-num-ranks"), "2");
    EXPECT_FALSE(svg.Select("//*[local-name()='rect'][@class='bar']").empty());
  }

  // The predicted bars are the plan's own predictions: rank 0 recorded the
  // cost-parameter version the plan was made with.
  absl::StatusOr<StepPlanFile> plan = ReadStepPlanFile(timing_dir, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->cost_model_params_version, plan->plan_params_version);
  const MarkupDocument svg = MarkupDocument::ParseXml(ReadTestFile(svg_path));
  EXPECT_NEAR(NumberAttribute(svg.Select("/*")[0], "data-step-seconds"),
              plan->plan.predicted_step_seconds,
              1e-5 * plan->plan.predicted_step_seconds);
  int checked = 0;
  for (xmlNode* row : svg.Select("//*[local-name()='g'][@class='row']")) {
    std::vector<int> members;
    for (absl::string_view rank :
         absl::StrSplit(Attribute(row, "data-ranks"), ',')) {
      int value = 0;
      ASSERT_TRUE(absl::SimpleAtoi(rank, &value)) << rank;
      members.push_back(value);
    }
    const std::vector<xmlNode*> bars = MeasuredBarsOfRow(row);
    ASSERT_FALSE(members.empty());
    ASSERT_EQ(bars.size(), ranks[members[0]].micro_batches.size())
        << "ranks " << Attribute(row, "data-ranks");
    for (size_t m = 0; m < bars.size(); ++m) {
      double recorded = 0;
      for (int rank : members) {
        recorded += ranks[rank].micro_batches[m].compute_seconds +
                    ranks[rank].micro_batches[m].communication_seconds;
      }
      recorded /= members.size();
      EXPECT_GT(recorded, 0);
      EXPECT_NEAR(NumberAttribute(bars[m], "data-duration-seconds"), recorded,
                  1e-5 * recorded)
          << "ranks " << Attribute(row, "data-ranks") << " micro-batch " << m;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);

  // The planner recorded the step's plan and reports in its state
  // directory: `dcp timeline` draws the same rows and measured bars.
  const std::string state_svg = absl::StrCat(dir, "/state_step1.svg");
  const JobRun timeline =
      RunToEnd({Runfile("planner/cli/dcp"), "timeline",
                absl::StrCat("--state-dir=", dir, "/planner_state"), "--step=1",
                absl::StrCat("--out=", state_svg)},
               absl::StrCat(dir, "/dcp_timeline.log"), absl::Minutes(1));
  ASSERT_EQ(timeline.exit_code, 0) << timeline.output;
  const MarkupDocument recorded =
      MarkupDocument::ParseXml(ReadTestFile(state_svg));
  ASSERT_NE(recorded.doc, nullptr) << "not well-formed XML";
  EXPECT_EQ(Attribute(recorded.Select("/*")[0], "data-num-ranks"), "2");
  const std::map<std::string, std::vector<double>> job_bars = MeasuredBars(svg);
  const std::map<std::string, std::vector<double>> state_bars =
      MeasuredBars(recorded);
  ASSERT_EQ(state_bars.size(), job_bars.size());
  for (const auto& [ranks, seconds] : job_bars) {
    ASSERT_EQ(state_bars.count(ranks), 1u) << "ranks " << ranks;
    const std::vector<double>& drawn = state_bars.at(ranks);
    ASSERT_EQ(drawn.size(), seconds.size()) << "ranks " << ranks;
    for (size_t m = 0; m < seconds.size(); ++m) {
      EXPECT_NEAR(drawn[m], seconds[m], 1e-5 * seconds[m])
          << "ranks " << ranks << " micro-batch " << m;
    }
  }
}

TEST(MeasuredTimelineJobTest, APlannerStateDirThatHoldsFilesIsAUsageError) {
  const std::string dir = EmptyTestDirectory("used_planner_state");
  WriteTestFile(absl::StrCat(dir, "/job.pb"), "");
  const JobRun run = RunToEnd({Runfile("launcher/dcp_local_job"),
                               absl::StrCat("--planner-state-dir=", dir)},
                              "/dev/null", absl::Minutes(1));
  EXPECT_EQ(run.exit_code, 2) << run.output;
}

TEST(MeasuredTimelineJobTest, ATimelineStepPastTheRunIsAUsageError) {
  const JobRun run = RunToEnd(
      {Runfile("launcher/dcp_local_job"), "--steps=2", "--timeline-step=2"},
      "/dev/null", absl::Minutes(1));
  EXPECT_EQ(run.exit_code, 2) << run.output;
}

}  // namespace
}  // namespace dcp
