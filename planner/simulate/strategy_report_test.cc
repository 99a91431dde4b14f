#include "planner/simulate/strategy_report.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/test_files.h"
#include "gtest/gtest.h"
#include "planner/plan/test_cost_model.h"
#include "planner/simulate/markup_test_util.h"
#include "planner/simulate/simulate_testing.h"
#include "planner/simulate/simulator.h"

namespace dcp {
namespace {

constexpr int kSteps = 5;

SimulationReport Simulated(const CostModel& cost_model, bool keep_plans) {
  return SimulateSpec(cost_model, "longtail", /*seed=*/7, kSteps, keep_plans);
}

class StrategyReportTest : public ::testing::Test {
 protected:
  StrategyReportTest()
      : cost_model_(MakeCostModel("llama3-8b", 2, 8)),
        report_(Simulated(cost_model_, /*keep_plans=*/true)) {}

  CostModel cost_model_;
  SimulationReport report_;
};

TEST_F(StrategyReportTest, IsSelfContainedHtmlWithEveryStrategy) {
  StrategyReportOptions options;
  options.command_line = "dcp simulate --report=out <&>";
  absl::StatusOr<std::string> html =
      RenderStrategyReportHtml(report_, cost_model_, options);
  ASSERT_TRUE(html.ok()) << html.status();
  const MarkupDocument doc = MarkupDocument::ParseHtml(*html);
  ASSERT_NE(doc.doc, nullptr);
  // Nothing to fetch or run.
  EXPECT_TRUE(doc.Select("//script").empty());
  EXPECT_TRUE(doc.Select("//link").empty());
  EXPECT_TRUE(doc.Select("//img").empty());
  EXPECT_TRUE(doc.Select("//*[@src]").empty());
  EXPECT_TRUE(doc.Select("//*[@href]").empty());
  EXPECT_EQ(html->find("http://www.w3.org/2000/svg"),
            html->find("http://"));  // the only URL is SVG's namespace
  EXPECT_EQ(html->find("https://"), std::string::npos);
  EXPECT_NE(html->find("dcp simulate --report=out &lt;&amp;&gt;"),
            std::string::npos);

  const std::vector<xmlNode*> rows =
      doc.Select("//table[@id='strategies']/tr[@data-name]");
  ASSERT_EQ(rows.size(), report_.strategies.size());
  const std::vector<xmlNode*> best =
      doc.Select("//table[@id='strategies']/tr[@class='best-static']");
  ASSERT_EQ(best.size(), 1u);
  // The best static row is best-static's, at 1.00x, and no static strategy
  // simulated beats it.
  EXPECT_EQ(Attribute(best[0], "data-name"), "best-static");
  double best_static = 0;
  for (const StrategyStats& stats : report_.strategies) {
    if (stats.name == "best-static") best_static = stats.mean_step_seconds;
  }
  for (const StrategyStats& stats : report_.strategies) {
    if (stats.name == "bucket" || stats.name == "packed") {
      EXPECT_LE(best_static, stats.mean_step_seconds * (1 + 1e-12))
          << stats.name;
    }
  }
  EXPECT_NE(TextOf(best[0]).find("1.00x"), std::string::npos)
      << TextOf(best[0]);
}

TEST_F(StrategyReportTest, TimelinesAreEachStrategysMedianBatch) {
  absl::StatusOr<std::string> html =
      RenderStrategyReportHtml(report_, cost_model_);
  ASSERT_TRUE(html.ok()) << html.status();
  const MarkupDocument doc = MarkupDocument::ParseHtml(*html);
  ASSERT_NE(doc.doc, nullptr);
  const std::vector<xmlNode*> figures =
      doc.Select("//figure[@class='timeline']");
  ASSERT_EQ(figures.size(), report_.strategies.size());
  for (size_t s = 0; s < figures.size(); ++s) {
    const StrategyStats& stats = report_.strategies[s];
    EXPECT_EQ(Attribute(figures[s], "data-strategy"), stats.name);
    const int step = static_cast<int>(NumberAttribute(figures[s], "data-step"));
    ASSERT_GE(step, 0);
    ASSERT_LT(step, kSteps);
    // At least half the batches are no slower, and at least half no faster.
    const double median = stats.step_seconds[step];
    const auto no_faster =
        std::count_if(stats.step_seconds.begin(), stats.step_seconds.end(),
                      [&](double seconds) { return seconds >= median; });
    const auto no_slower =
        std::count_if(stats.step_seconds.begin(), stats.step_seconds.end(),
                      [&](double seconds) { return seconds <= median; });
    EXPECT_GE(2 * no_faster, kSteps);
    EXPECT_GE(2 * no_slower, kSteps);
    // The drawn plan is that step's: its rows cover every rank once.
    const std::string figure_path =
        "//figure[@class='timeline'][" + std::to_string(s + 1) + "]";
    const std::vector<xmlNode*> svg = doc.Select(figure_path + "/svg");
    ASSERT_EQ(svg.size(), 1u);
    // A phased strategy is drawn by its median batch's longest phase.
    const Plan* drawn = nullptr;
    if (stats.plans.empty()) {
      ASSERT_EQ(stats.phased_plans.size(), static_cast<size_t>(kSteps));
      const std::vector<Plan>& phases = stats.phased_plans[step].phases;
      const size_t phase =
          static_cast<size_t>(NumberAttribute(figures[s], "data-phase"));
      ASSERT_LT(phase, phases.size());
      for (const Plan& other : phases) {
        EXPECT_LE(other.slowest_group_seconds,
                  phases[phase].slowest_group_seconds);
      }
      drawn = &phases[phase];
    } else {
      drawn = &stats.plans[step];
    }
    EXPECT_NEAR(NumberAttribute(svg[0], "data-step-seconds"),
                drawn->predicted_step_seconds, 1e-5 * median);
    size_t ranks = 0;
    for (xmlNode* row : doc.Select(figure_path + "//g[@class='row']")) {
      const std::vector<std::string> listed =
          absl::StrSplit(Attribute(row, "data-ranks"), ',');
      ranks += listed.size();
    }
    EXPECT_EQ(ranks, 16u) << stats.name;
  }
}

TEST_F(StrategyReportTest, HistogramCountsEverySequence) {
  absl::StatusOr<std::string> html =
      RenderStrategyReportHtml(report_, cost_model_);
  ASSERT_TRUE(html.ok()) << html.status();
  const MarkupDocument doc = MarkupDocument::ParseHtml(*html);
  size_t sequences = 0;
  for (const auto& batch : report_.batch_lengths) sequences += batch.size();
  double counted = 0;
  double token_share = 0;
  for (xmlNode* bin : doc.Select("//svg[@class='histogram']/g[@class='bin']")) {
    counted += NumberAttribute(bin, "data-sequences");
    token_share += NumberAttribute(bin, "data-token-fraction");
  }
  EXPECT_EQ(counted, static_cast<double>(sequences));
  EXPECT_NEAR(token_share, 1.0, 1e-4);
  // One distribution row per strategy, one dot per batch.
  for (const StrategyStats& stats : report_.strategies) {
    EXPECT_EQ(doc.Select("//svg[@class='distribution']/g[@data-name='" +
                         stats.name + "']/circle")
                  .size(),
              static_cast<size_t>(kSteps));
  }
}

TEST_F(StrategyReportTest, NeedsTheKeptPlans) {
  const SimulationReport without = Simulated(cost_model_, /*keep_plans=*/false);
  absl::Status status = RenderStrategyReportHtml(without, cost_model_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("keep_plans"), absl::string_view::npos);
}

TEST_F(StrategyReportTest, WritesIndexHtmlOrSaysWhyNot) {
  const std::string root = TestTempPath("report");
  ASSERT_TRUE(WriteStrategyReport(root + "/nested", report_, cost_model_).ok());
  EXPECT_NE(ReadTestFile(root + "/nested/index.html").find("<!DOCTYPE html>"),
            std::string::npos);
  // A file where the directory should be.
  WriteTestFile(root + "/blocker", "x");
  absl::Status status =
      WriteStrategyReport(root + "/blocker/sub", report_, cost_model_);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("blocker"), absl::string_view::npos)
      << status;
}

}  // namespace
}  // namespace dcp
