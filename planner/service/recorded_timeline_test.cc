// `dcp timeline --state-dir` over a state directory that a PlannerHandler
// wrote while planning steps and taking the ranks' reports: the SVG, parsed
// with libxml2, shows every rank, and its measured bars are what the ranks
// reported.

#include "planner/service/recorded_timeline.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/fake_clock.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/cli/cli_test_util.h"
#include "planner/service/planner_handler_test_support.h"
#include "planner/service/step_state_files.h"
#include "planner/simulate/markup_test_util.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

// What rank `rank` measured of micro-batch `m` of step `step`: distinct
// per rank, so that a group's mean is not any one rank's time.
double ComputeSeconds(int64_t step, int rank, int m) {
  return 0.01 * (m + 1) + 0.002 * rank + 0.0001 * step;
}
double CommunicationSeconds(int rank) { return 0.0005 * (rank + 1); }

std::vector<v1::ReportStepStatsRequest> Reports(const v1::Plan& plan) {
  std::vector<v1::ReportStepStatsRequest> reports;
  for (const v1::Group& group : plan.groups()) {
    for (int rank : group.ranks()) {
      v1::ReportStepStatsRequest report;
      report.set_worker_id(absl::StrCat("w", rank));
      report.set_step(plan.step());
      report.set_rank(rank);
      report.set_step_seconds(1 + 0.125 * rank);
      for (int m = 0; m < group.micro_batches_size(); ++m) {
        v1::MicroBatchStats* stats = report.add_micro_batches();
        stats->set_micro_batch_index(m);
        stats->set_compute_seconds(ComputeSeconds(plan.step(), rank, m));
        stats->set_communication_seconds(CommunicationSeconds(rank));
      }
      reports.push_back(report);
    }
  }
  return reports;
}

std::vector<int> RanksOf(const std::string& list) {
  std::vector<int> ranks;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    int rank = -1;
    EXPECT_TRUE(absl::SimpleAtoi(part, &rank)) << list;
    ranks.push_back(rank);
  }
  return ranks;
}

// Checks the SVG of `plan`'s step: every rank in a row, and, when
// `measured`, each row's measured bars equal to its group's ranks' mean
// reported compute + communication per micro-batch (else none).
void CheckPicture(const std::string& svg, const v1::Plan& plan,
                  bool measured) {
  const MarkupDocument doc = MarkupDocument::ParseXml(svg);
  ASSERT_NE(doc.doc, nullptr) << "not well-formed SVG";
  std::map<std::vector<int>, const v1::Group*> group_of_ranks;
  for (const v1::Group& group : plan.groups()) {
    group_of_ranks[std::vector<int>(group.ranks().begin(),
                                    group.ranks().end())] = &group;
  }
  std::set<int> drawn;
  int measured_bars = 0;
  for (xmlNode* row : doc.Select("//*[local-name()='g'][@class='row']")) {
    const std::vector<int> ranks = RanksOf(Attribute(row, "data-ranks"));
    drawn.insert(ranks.begin(), ranks.end());
    ASSERT_EQ(group_of_ranks.count(ranks), 1u)
        << "row " << Attribute(row, "data-ranks") << " is no group";
    const v1::Group& group = *group_of_ranks[ranks];
    for (xmlNode* bar = row->children; bar != nullptr; bar = bar->next) {
      if (bar->type != XML_ELEMENT_NODE ||
          Attribute(bar, "class") != "measured") {
        continue;
      }
      ++measured_bars;
      const int m = static_cast<int>(NumberAttribute(bar, "data-micro-batch"));
      ASSERT_GE(m, 0);
      ASSERT_LT(m, group.micro_batches_size());
      double expected = 0;
      for (int rank : group.ranks()) {
        expected += ComputeSeconds(plan.step(), rank, m) +
                    CommunicationSeconds(rank);
      }
      expected /= group.ranks_size();
      EXPECT_NEAR(NumberAttribute(bar, "data-duration-seconds"), expected,
                  1e-5 * expected)
          << "ranks " << Attribute(row, "data-ranks") << " micro-batch " << m;
    }
  }
  std::set<int> every_rank;
  int micro_batches = 0;
  for (const v1::Group& group : plan.groups()) {
    every_rank.insert(group.ranks().begin(), group.ranks().end());
    micro_batches += group.micro_batches_size();
  }
  EXPECT_EQ(drawn, every_rank);
  EXPECT_EQ(every_rank.size(), 4u);
  EXPECT_EQ(measured_bars, measured ? micro_batches : 0);
  EXPECT_EQ(doc.Select("//*[local-name()='g'][@class='measured-step']").size(),
            measured ? 1u : 0u);
}

// A planner of the CPU world with `options`, its four workers registered.
std::unique_ptr<PlannerHandler> StatefulPlanner(
    const PlannerHandlerOptions& options, const Clock& clock,
    RecordingMetrics& metrics) {
  std::unique_ptr<PlannerHandler> handler =
      MakeHandler(options, clock, &metrics);
  if (handler != nullptr) RegisterWorld(*handler, 4, 1);
  return handler;
}

// The CPU world, its planner keeping its state in `directory`.
PlannerHandlerOptions StatefulOptions(const std::string& directory) {
  PlannerHandlerOptions options = CpuOptions();
  options.state_dir = directory;
  // The recorded timeline draws plans of one layout: phases off.
  PhasedPlanningOptions one_layout;
  one_layout.enabled = false;
  options.make_step_plan = StepPlanMaker(one_layout);
  return options;
}

TEST(RecordedTimelineTest, DcpTimelineDrawsWhatTheRanksReported) {
  const std::string directory = FreshTestDirectory("recorded_timeline_");
  FakeClock clock;
  RecordingMetrics metrics;
  PlannerHandlerOptions options = StatefulOptions(directory);
  options.plan_cache_steps = 3;
  std::vector<v1::Plan> plans;
  auto handler = StatefulPlanner(options, clock, metrics);
  ASSERT_NE(handler, nullptr);
  for (int64_t step = 0; step < 4; ++step) {
    absl::StatusOr<v1::GetPlanResponse> plan =
        handler->GetPlan(PlanRequest("w0", MakeBatch(step, 12)));
    ASSERT_TRUE(plan.ok()) << plan.status();
    plans.push_back(plan->plan());
    if (step == 3) continue;  // step 3: no reports
    for (const v1::ReportStepStatsRequest& report : Reports(plan->plan())) {
      ASSERT_TRUE(handler->ReportStepStats(report).ok());
    }
  }
  // Read while the planner runs (it holds the directory's lock), once it
  // wrote the reports waiting (it writes them off the reports' path).
  handler->Shutdown();
  const std::string svg_path = directory + "_step2.svg";
  CliResult drawn = RunCli({"timeline", "--state-dir=" + directory,
                            "--step=2", "--out=" + svg_path});
  ASSERT_EQ(drawn.exit_code, 0) << drawn.err;
  EXPECT_THAT(drawn.out, HasSubstr("step 2: dcp plan of"));
  EXPECT_THAT(drawn.out, HasSubstr("measured 1.375 s (slowest of 4"));
  CheckPicture(ReadTestFile(svg_path), plans[2], /*measured=*/true);

  // Step 3 has no reports: predicted only, and said so.
  CliResult predicted =
      RunCli({"timeline", "--state-dir=" + directory, "--step=3"});
  ASSERT_EQ(predicted.exit_code, 0) << predicted.err;
  EXPECT_THAT(predicted.err, HasSubstr("prediction only"));
  CheckPicture(predicted.out, plans[3], /*measured=*/false);

  // Step 0 left the window of 3 steps.
  CliResult outside =
      RunCli({"timeline", "--state-dir=" + directory, "--step=0"});
  EXPECT_EQ(outside.exit_code, 2);
  EXPECT_THAT(outside.err, HasSubstr("steps present: 1..3"));

  // A restarted planner reads the directory; the records stay drawable.
  handler.reset();
  handler = MakeHandler(options, clock, &metrics);
  ASSERT_NE(handler, nullptr);
  drawn = RunCli({"timeline", "--state-dir=" + directory, "--step=1"});
  ASSERT_EQ(drawn.exit_code, 0) << drawn.err;
  CheckPicture(drawn.out, plans[1], /*measured=*/true);
}

TEST(RecordedTimelineTest, BadCommandLinesAreUsageErrors) {
  CliResult missing =
      RunCli({"timeline", "--state-dir=/nonexistent/dir", "--step=1"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("no state directory '/nonexistent/dir'"));
  CliResult no_step = RunCli({"timeline", "--state-dir=/tmp"});
  EXPECT_EQ(no_step.exit_code, 2);
  EXPECT_THAT(no_step.err, HasSubstr("--step is required"));
  CliResult help = RunCli({"timeline", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--state-dir"));
}

TEST(RecordedTimelineTest, ReportsThatDoNotFitThePlanAreNamed) {
  const std::string directory = FreshTestDirectory("recorded_timeline_");
  FakeClock clock;
  RecordingMetrics metrics;
  auto handler = StatefulPlanner(StatefulOptions(directory), clock, metrics);
  ASSERT_NE(handler, nullptr);
  ASSERT_TRUE(handler->GetPlan(PlanRequest("w0", MakeBatch(0, 12))).ok());
  handler->Shutdown();  // writes the plan record, written off the call
  absl::StatusOr<RecordedStep> step = ReadRecordedStep(directory, 0);
  ASSERT_TRUE(step.ok()) << step.status();
  // Half of the ranks reported: their groups are measured, the rest not.
  step->reports.emplace();
  step->reports->set_step(0);
  const v1::Group& first = step->plan.plan().groups(0);
  for (int rank : first.ranks()) {
    v1::RankStepReport* report = step->reports->add_ranks();
    report->set_rank(rank);
    report->set_step_seconds(2);
    for (int m = 0; m < first.micro_batches_size(); ++m) {
      v1::MeasuredMicroBatch* micro = report->add_micro_batches();
      micro->set_micro_batch_index(m);
      micro->set_compute_seconds(0.5);
    }
  }
  absl::StatusOr<RecordedTimeline> partly = LayOutRecordedStep(*step);
  ASSERT_TRUE(partly.ok()) << partly.status();
  EXPECT_EQ(partly->reported_ranks.size(),
            static_cast<size_t>(first.ranks_size()));
  EXPECT_EQ(partly->unreported_ranks.size(),
            4u - static_cast<size_t>(first.ranks_size()));
  if (!partly->unreported_ranks.empty()) {
    EXPECT_THAT(DescribeRecordedTimeline(*partly), HasSubstr("no report from"));
  }

  RecordedStep twice = *step;
  *twice.reports->add_ranks() = twice.reports->ranks(0);
  EXPECT_THAT(LayOutRecordedStep(twice).status().message(),
              HasSubstr("twice"));
  RecordedStep short_report = *step;
  short_report.reports->mutable_ranks(0)->mutable_micro_batches()->RemoveLast();
  EXPECT_THAT(LayOutRecordedStep(short_report).status().message(),
              HasSubstr("micro-batches but its group runs"));
  RecordedStep out_of_range = *step;
  out_of_range.reports->mutable_ranks(0)->mutable_micro_batches(0)
      ->set_micro_batch_index(99);
  EXPECT_THAT(LayOutRecordedStep(out_of_range).status().message(),
              HasSubstr("reported micro-batch 99 but its group runs"));
  RecordedStep stranger = *step;
  stranger.reports->mutable_ranks(0)->set_rank(17);
  EXPECT_THAT(LayOutRecordedStep(stranger).status().message(),
              HasSubstr("rank 17, which has no group"));
}

}  // namespace
}  // namespace dcp
