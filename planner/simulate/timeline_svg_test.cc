#include "planner/simulate/timeline_svg.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "planner/simulate/markup_test_util.h"
#include "planner/search/planner.h"
#include "planner/plan/test_cost_model.h"
#include "planner/simulate/timeline.h"

namespace dcp {
namespace {

constexpr double kEps = 1e-6;
// The SVG prints seconds with 6 significant digits (%.6g): each number is
// off by up to 5e-6 of itself.
constexpr double kPrintedRelativeError = 5e-6;

struct Drawn {
  Plan plan;
  Timeline timeline;
  std::string svg;
};

Drawn Draw(int num_nodes, int gpus_per_node, std::vector<int64_t> lengths,
           TimelineOptions options = {}) {
  const CostModel cost_model =
      MakeCostModel("llama3-8b", num_nodes, gpus_per_node);
  Drawn drawn;
  absl::StatusOr<Plan> plan = Planner(cost_model, {}).PlanBatch(lengths);
  EXPECT_TRUE(plan.ok()) << plan.status();
  drawn.plan = *plan;
  drawn.plan.lower_bound_seconds = 0.5 * drawn.plan.predicted_step_seconds;
  absl::StatusOr<Timeline> timeline =
      BuildTimeline(cost_model, lengths, drawn.plan, options);
  EXPECT_TRUE(timeline.ok()) << timeline.status();
  drawn.timeline = *timeline;
  drawn.svg = RenderTimelineSvg(drawn.timeline);
  return drawn;
}

std::vector<int64_t> Skewed() {
  std::vector<int64_t> lengths = {131072};
  for (int i = 0; i < 40; ++i) lengths.push_back(1024 + 211 * i);
  return lengths;
}

std::vector<int> Ranks(const std::string& list) {
  std::vector<int> ranks;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int rank = 0;
    EXPECT_TRUE(absl::SimpleAtoi(part, &rank)) << list;
    ranks.push_back(rank);
  }
  return ranks;
}

TEST(TimelineSvgTest, ParsesAsXmlWithEveryRankAndBarsInsideTheStep) {
  const Drawn drawn = Draw(2, 8, Skewed());
  const MarkupDocument doc = MarkupDocument::ParseXml(drawn.svg);
  ASSERT_NE(doc.doc, nullptr) << "not well-formed XML:\n"
                              << drawn.svg.substr(0, 2000);
  const std::vector<xmlNode*> roots = doc.Select("/*[local-name()='svg']");
  ASSERT_EQ(roots.size(), 1u);
  EXPECT_EQ(NumberAttribute(roots[0], "data-num-ranks"), 16);
  const double step = NumberAttribute(roots[0], "data-step-seconds");
  EXPECT_NEAR(step, drawn.plan.predicted_step_seconds, 1e-5 * step);

  const std::vector<xmlNode*> rows =
      doc.Select("//*[local-name()='g'][@class='row']");
  ASSERT_EQ(rows.size(), drawn.plan.groups.size());
  std::vector<int> ranks;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<int> row_ranks = Ranks(Attribute(rows[i], "data-ranks"));
    ranks.insert(ranks.end(), row_ranks.begin(), row_ranks.end());
    const int group_index =
        static_cast<int>(NumberAttribute(rows[i], "data-group-index"));
    const GroupPlan& group = drawn.plan.groups[group_index];
    EXPECT_EQ(row_ranks, group.ranks);
    EXPECT_EQ(NumberAttribute(rows[i], "data-sp-size"), group.sp_size());
    EXPECT_EQ(NumberAttribute(rows[i], "data-micro-batches"),
              group.micro_batches.size());
    // The label says the group's SP size and accumulation count.
    const std::vector<xmlNode*> labels =
        doc.Select("//*[local-name()='g'][@class='row'][" +
                   std::to_string(i + 1) + "]/*[local-name()='text']");
    ASSERT_EQ(labels.size(), 1u);
    const std::string expected =
        "SP " + std::to_string(group.sp_size()) + " x " +
        std::to_string(group.micro_batches.size()) + " mb";
    EXPECT_NE(TextOf(labels[0]).find(expected), std::string::npos)
        << TextOf(labels[0]) << " vs " << expected;
  }
  std::sort(ranks.begin(), ranks.end());
  for (int r = 0; r < 16; ++r) EXPECT_EQ(ranks[r], r);
  EXPECT_EQ(ranks.size(), 16u);

  const std::vector<xmlNode*> bars =
      doc.Select("//*[local-name()='rect'][@class='bar']");
  ASSERT_FALSE(bars.empty());
  std::set<std::string> parts;
  for (xmlNode* bar : bars) {
    const double start = NumberAttribute(bar, "data-start-seconds");
    const double duration = NumberAttribute(bar, "data-duration-seconds");
    EXPECT_GE(start, -kEps);
    EXPECT_GT(duration, 0);
    // start, duration and step are each rounded.
    EXPECT_LE(start + duration, step * (1 + 3 * kPrintedRelativeError));
    // Pixels agree with seconds: the bar lies inside the plot's width.
    EXPECT_GE(NumberAttribute(bar, "x"), 0);
    EXPECT_LE(NumberAttribute(bar, "x") + NumberAttribute(bar, "width"),
              1200 + 0.01);
    parts.insert(Attribute(bar, "data-part"));
  }
  EXPECT_TRUE(parts.count("forward") && parts.count("backward"))
      << "parts drawn: " << parts.size();
  // The optimizer step ends every row, inside the step.
  EXPECT_EQ(doc.Select("//*[local-name()='rect'][@class='bar'][@data-part="
                       "'optimizer step']")
                .size(),
            rows.size());
  // The lower bound is drawn where the plan puts it.
  const std::vector<xmlNode*> bound =
      doc.Select("//*[local-name()='g'][@class='lower-bound']");
  ASSERT_EQ(bound.size(), 1u);
  EXPECT_NEAR(NumberAttribute(bound[0], "data-seconds"),
              drawn.plan.lower_bound_seconds,
              1e-5 * drawn.plan.lower_bound_seconds);
}

TEST(TimelineSvgTest, IdleGapsFillUpToTheSlowestGroup) {
  const Drawn drawn = Draw(1, 8, Skewed());
  const MarkupDocument doc = MarkupDocument::ParseXml(drawn.svg);
  ASSERT_NE(doc.doc, nullptr);
  for (xmlNode* idle : doc.Select("//*[local-name()='rect'][@class='idle']")) {
    EXPECT_NEAR(NumberAttribute(idle, "data-start-seconds") +
                    NumberAttribute(idle, "data-duration-seconds"),
                drawn.timeline.slowest_group_seconds,
                1e-5 * drawn.timeline.slowest_group_seconds);
  }
}

TEST(TimelineSvgTest, MeasuredBarsSitBesideThePredictedOnes) {
  Drawn drawn = Draw(1, 8, Skewed());
  std::vector<std::vector<double>> measured;
  for (const GroupPlan& group : drawn.plan.groups) {
    measured.push_back(std::vector<double>(group.micro_batches.size(), 0.25));
  }
  ASSERT_TRUE(AttachMeasuredSeconds(measured, 3.5, drawn.timeline).ok());
  const std::string svg = RenderTimelineSvg(drawn.timeline);
  const MarkupDocument doc = MarkupDocument::ParseXml(svg);
  ASSERT_NE(doc.doc, nullptr);
  size_t expected = 0;
  for (const auto& group : measured) expected += group.size();
  EXPECT_EQ(doc.Select("//*[local-name()='rect'][@class='measured']").size(),
            expected);
  const std::vector<xmlNode*> step =
      doc.Select("//*[local-name()='g'][@class='measured-step']");
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(NumberAttribute(step[0], "data-seconds"), 3.5);
}

TEST(TimelineSvgTest, FourThousandRanksStayReadable) {
  std::vector<int64_t> lengths;
  for (int i = 0; i < 16384; ++i) lengths.push_back(256 + (i * 104729) % 16384);
  for (int i = 0; i < 8; ++i) lengths.push_back(131072);
  TimelineOptions options;
  options.max_rows = 64;
  const Drawn drawn = Draw(512, 8, lengths, options);
  const MarkupDocument doc = MarkupDocument::ParseXml(drawn.svg);
  ASSERT_NE(doc.doc, nullptr);
  const std::vector<xmlNode*> rows =
      doc.Select("//*[local-name()='g'][@class='row']");
  EXPECT_LE(rows.size(), 64u + 8u);  // at most one extra row per SP size
  size_t ranks = 0;
  for (xmlNode* row : rows) ranks += Ranks(Attribute(row, "data-ranks")).size();
  EXPECT_EQ(ranks, 4096u);
  // A picture of this size stays small enough to open and share.
  EXPECT_LT(drawn.svg.size(), 4u << 20);
}

TEST(TimelineSvgTest, EscapesText) {
  EXPECT_EQ(XmlEscape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  Drawn drawn = Draw(1, 8, Skewed());
  drawn.timeline.strategy = "<script>&";
  const MarkupDocument doc =
      MarkupDocument::ParseXml(RenderTimelineSvg(drawn.timeline));
  ASSERT_NE(doc.doc, nullptr);
  EXPECT_TRUE(doc.Select("//*[local-name()='script']").empty());
}

}  // namespace
}  // namespace dcp
