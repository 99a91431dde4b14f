// The breakdown and the measured timeline are what the workers reported:
// known per-rank records against a plan priced with a known cost model.

#include "launcher/cost_breakdown.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/percentile.h"
#include "cost_model/cost_model.h"
#include "cost_model/micro_batch_shape.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/measured_timeline.h"
#include "planner/simulate/markup_test_util.h"
#include "planner/plan/plan.h"
#include "planner/plan/test_cost_model.h"
#include "planner/simulate/timeline_svg.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

struct Predicted {
  double compute = 0;
  double communication = 0;
};

/// What the cost model predicts of `micro_batch` in `group`: compute is the
/// forward and backward less the all-to-alls.
Predicted PredictedOf(const CostModel& cost_model,
                      const std::vector<int64_t>& lengths,
                      const GroupPlan& group, const MicroBatchPlan& micro) {
  MicroBatchShape shape;
  shape.sp_size = group.sp_size();
  for (int index : micro.sequence_indices) shape.AddSequence(lengths[index]);
  const MicroBatchCost cost =
      cost_model.MicroBatch(shape, micro.checkpointed_layers);
  return {cost.forward_seconds + cost.backward_seconds -
              cost.communication_seconds,
          cost.communication_seconds};
}

class CostBreakdownTest : public ::testing::Test {
 protected:
  CostBreakdownTest() : cost_model_(MakeCostModel("tiny", 1, 4)) {
    StepPlanFile& file = step_.plan;
    file.step = 5;
    file.lengths_tokens = {2048, 1024, 256, 128, 512, 64, 900};
    GroupPlan pair;
    pair.ranks = {0, 1};
    pair.micro_batches.resize(2);
    pair.micro_batches[0].sequence_indices = {0};
    pair.micro_batches[1].sequence_indices = {1};
    pair.micro_batches[1].checkpointed_layers = 1;
    GroupPlan three;
    three.ranks = {2};
    three.micro_batches.resize(3);
    three.micro_batches[0].sequence_indices = {2, 3};
    three.micro_batches[1].sequence_indices = {4};
    three.micro_batches[2].sequence_indices = {5};
    GroupPlan one;
    one.ranks = {3};
    one.micro_batches.resize(1);
    one.micro_batches[0].sequence_indices = {6};
    file.plan.groups = {pair, three, one};
    file.plan.strategy = "dcp";
    PredictPlan(cost_model_, file.lengths_tokens, file.plan);
    file.model = cost_model_.model();
    file.cluster = cost_model_.cluster();
    file.params = cost_model_.params();

    // Every micro-batch measured a known factor off its prediction; rank 1
    // differs from rank 0 so that the group's mean is what counts.
    int factor_index = 0;
    for (size_t g = 0; g < file.plan.groups.size(); ++g) {
      const GroupPlan& group = file.plan.groups[g];
      for (int rank : group.ranks) {
        RankStepTiming timing;
        timing.step = 5;
        timing.rank = rank;
        timing.group_index = static_cast<int>(g);
        timing.step_seconds = 3 * file.plan.predicted_step_seconds + 0.01 * g;
        for (const MicroBatchPlan& micro : group.micro_batches) {
          const Predicted p =
              PredictedOf(cost_model_, file.lengths_tokens, group, micro);
          const double factor = 1.0 + 0.1 * (factor_index++ % 7) + 0.05 * rank;
          timing.micro_batches.push_back(
              {p.compute * factor, p.communication * 2 * factor});
        }
        step_.ranks.push_back(timing);
      }
    }
  }

  const CostModel cost_model_;
  MeasuredStep step_;
};

TEST_F(CostBreakdownTest, TermsAreTheGroupMeansOfTheRecordsAgainstTheModel) {
  const Plan& plan = step_.plan.plan;
  std::vector<double> compute_errors;
  std::vector<double> communication_errors;
  std::vector<double> idle_errors;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const GroupPlan& group = plan.groups[g];
    double busy = 0;
    double idle = 0;
    double step = 0;
    for (size_t m = 0; m < group.micro_batches.size(); ++m) {
      const Predicted p = PredictedOf(cost_model_, step_.plan.lengths_tokens,
                                      group, group.micro_batches[m]);
      busy += p.compute + p.communication;
      double compute = 0;
      double communication = 0;
      for (int rank : group.ranks) {
        compute += step_.ranks[rank].micro_batches[m].compute_seconds;
        communication +=
            step_.ranks[rank].micro_batches[m].communication_seconds;
      }
      compute /= group.ranks.size();
      communication /= group.ranks.size();
      compute_errors.push_back(std::abs(p.compute - compute) / compute);
      if (communication > 0) {
        communication_errors.push_back(std::abs(p.communication -
                                                communication) /
                                       communication);
      }
    }
    for (int rank : group.ranks) {
      idle += step_.ranks[rank].IdleSeconds();
      step += step_.ranks[rank].step_seconds;
    }
    idle /= group.ranks.size();
    step /= group.ranks.size();
    idle_errors.push_back(
        std::abs(plan.predicted_step_seconds - busy - idle) / step);
  }
  ASSERT_EQ(compute_errors.size(), 6u);
  ASSERT_EQ(communication_errors.size(), 2u);  // only the SP 2 group's

  absl::StatusOr<CostBreakdown> breakdown = BreakdownOf({step_});
  ASSERT_TRUE(breakdown.ok()) << breakdown.status();
  EXPECT_EQ(breakdown->steps, 1);
  EXPECT_EQ(breakdown->compute.samples, 6);
  EXPECT_NEAR(breakdown->compute.median, Percentile(compute_errors, 0.5),
              1e-9);
  EXPECT_NEAR(breakdown->compute.p90, Percentile(compute_errors, 0.9), 1e-9);
  EXPECT_EQ(breakdown->communication.samples, 2);
  EXPECT_NEAR(breakdown->communication.median,
              Percentile(communication_errors, 0.5), 1e-9);
  EXPECT_NEAR(breakdown->communication.p90,
              Percentile(communication_errors, 0.9), 1e-9);
  EXPECT_EQ(breakdown->idle.samples, 3);
  EXPECT_NEAR(breakdown->idle.median, Percentile(idle_errors, 0.5), 1e-9);
  EXPECT_NEAR(breakdown->idle.p90, Percentile(idle_errors, 0.9), 1e-9);
  // Measured compute is 1.0-1.65x the prediction, so the model is low.
  EXPECT_LT(breakdown->compute.median_ratio, 1.0);

  const std::vector<std::string> lines = FormatBreakdown("dcp", *breakdown);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_THAT(lines[0], HasSubstr("dcp cost-model breakdown over 1 steps"));
  EXPECT_THAT(lines[1],
              HasSubstr(absl::StrFormat(
                  "median %5.1f%%  p90 %5.1f%%",
                  100 * Percentile(compute_errors, 0.5),
                  100 * Percentile(compute_errors, 0.9))));
  EXPECT_THAT(lines[2],
              HasSubstr(absl::StrFormat(
                  "median %5.1f%%  p90 %5.1f%%",
                  100 * Percentile(communication_errors, 0.5),
                  100 * Percentile(communication_errors, 0.9))));
  EXPECT_THAT(lines[3], HasSubstr("(3 group-steps"));
}

TEST_F(CostBreakdownTest, TheSvgsMeasuredBarsAreTheRecordedTimes) {
  absl::StatusOr<Timeline> timeline = MeasuredTimeline(step_);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  const MarkupDocument svg =
      MarkupDocument::ParseXml(RenderTimelineSvg(*timeline));
  ASSERT_NE(svg.doc, nullptr);
  const std::vector<xmlNode*> rows =
      svg.Select("//*[local-name()='g'][@class='row']");
  ASSERT_EQ(rows.size(), 3u);
  int checked = 0;
  for (size_t g = 0; g < 3; ++g) {
    const GroupPlan& group = step_.plan.plan.groups[g];
    const std::string xpath = absl::StrFormat(
        "//*[local-name()='g'][@class='row'][%d]"
        "/*[local-name()='rect'][@class='measured']",
        g + 1);
    const std::vector<xmlNode*> bars = svg.Select(xpath);
    ASSERT_EQ(bars.size(), group.micro_batches.size()) << "group " << g;
    for (size_t m = 0; m < bars.size(); ++m) {
      double recorded = 0;
      for (int rank : group.ranks) {
        recorded += step_.ranks[rank].micro_batches[m].compute_seconds +
                    step_.ranks[rank].micro_batches[m].communication_seconds;
      }
      recorded /= group.ranks.size();
      EXPECT_NEAR(NumberAttribute(bars[m], "data-duration-seconds"), recorded,
                  1e-5 * recorded)
          << "group " << g << " micro-batch " << m;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6);
}

TEST_F(CostBreakdownTest, RecordsThatDisagreeWithThePlanAreRefused) {
  MeasuredStep short_rank = step_;
  short_rank.ranks[2].micro_batches.pop_back();
  const absl::Status status = MeasuredTimeline(short_rank).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("rank 2 of step 5 measured 2"));
  EXPECT_FALSE(BreakdownOf({short_rank}).ok());

  MeasuredStep misplaced = step_;
  misplaced.ranks[3].group_index = 0;
  EXPECT_THAT(MeasuredTimeline(misplaced).status().message(),
              HasSubstr("does not place it there"));
}

}  // namespace
}  // namespace dcp
