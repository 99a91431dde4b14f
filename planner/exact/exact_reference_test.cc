#include "planner/exact/exact_reference.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "planner/exact/exact_testing.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/plan_testing.h"
#include "planner/plan/test_cost_model.h"
#include "planner/search/lower_bound.h"
#include "planner/search/planner.h"
#include "planner/strategies/baselines.h"

namespace dcp {
namespace {

constexpr double kTolerance = 1e-9;

TEST(ExactReferenceTest, TwoGpusTwoSequencesByHand) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 2);
  const std::vector<int64_t> lengths = {4096, 4096};
  absl::StatusOr<ExactReference> exact =
      ComputeExactReference(cost_model, {}, lengths);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->layouts, 2);  // {2} and {1, 1}
  // Every plan there is: SP 2 with one or two micro-batches, or SP 1 + SP 1
  // with one sequence each or both on one group (in one or two
  // micro-batches).
  // Each micro-batch at the fewest layers that fit (the model state leaves
  // little room on two GPUs), its plan valid.
  auto price = [&](Plan plan) {
    for (GroupPlan& group : plan.groups) {
      for (MicroBatchPlan& micro_batch : group.micro_batches) {
        micro_batch.checkpointed_layers =
            cost_model
                .MinCheckpointedLayers(ShapeOfSequences(
                    lengths, micro_batch.sequence_indices, group.sp_size()))
                .value_or(-1);
      }
    }
    EXPECT_TRUE(IsValidPlan(cost_model, lengths, plan));
    PredictPlan(cost_model, lengths, plan);
    return plan.predicted_step_seconds;
  };
  auto micro = [](std::vector<int> indices) {
    MicroBatchPlan micro_batch;
    micro_batch.sequence_indices = std::move(indices);
    return micro_batch;
  };
  std::vector<double> all = {
      price({"", {{{0, 1}, {micro({0, 1})}, 0}}}),
      price({"", {{{0, 1}, {micro({0}), micro({1})}, 0}}}),
      price({"", {{{0}, {micro({0})}, 0}, {{1}, {micro({1})}, 0}}}),
      price({"", {{{0}, {micro({0, 1})}, 0}, {{1}, {}, 0}}}),
      price({"", {{{0}, {micro({0}), micro({1})}, 0}, {{1}, {}, 0}}}),
  };
  const double optimum = *std::min_element(all.begin(), all.end());
  EXPECT_NEAR(exact->upper_seconds, optimum, kTolerance * optimum);
  EXPECT_LE(exact->lower_seconds, optimum * (1 + kTolerance));
}

TEST(ExactReferenceTest, BracketsTheOptimumOfRandomSmallBatches) {
  std::mt19937_64 rng(12);
  for (int i = 0; i < 30; ++i) {
    const SmallInstance instance =
        RandomSmallInstance(rng, /*max_sequences=*/8, /*length_doublings=*/7);
    const CostModel& cost_model = instance.cost_model;
    const std::vector<int64_t>& lengths = instance.lengths;
    SCOPED_TRACE(testing::Message() << "batch " << i);
    absl::StatusOr<ExactReference> exact =
        ComputeExactReference(cost_model, {}, lengths);
    ASSERT_TRUE(exact.ok()) << exact.status();
    // The best plan is a real plan, priced as every plan is.
    ExpectValidAndPricedAt(cost_model, lengths, exact->best_plan,
                           exact->upper_seconds, kTolerance);
    EXPECT_LE(exact->lower_seconds, exact->upper_seconds * (1 + kTolerance));
    // No plan beats the lower end: not dcp, not a static baseline.
    absl::StatusOr<Plan> dcp = Planner(cost_model, {}).PlanBatch(lengths);
    ASSERT_TRUE(dcp.ok()) << dcp.status();
    EXPECT_GE(dcp->predicted_step_seconds,
              exact->lower_seconds * (1 - kTolerance));
    absl::StatusOr<Plan> packed = PlanPacked(cost_model, lengths, {});
    ASSERT_TRUE(packed.ok());
    EXPECT_GE(packed->predicted_step_seconds,
              exact->lower_seconds * (1 - kTolerance));
    // And the independent lower bound stays below the optimum.
    absl::StatusOr<double> bound =
        StepTimeLowerBound(cost_model, *LegalSpSizes(cost_model, {}), lengths);
    ASSERT_TRUE(bound.ok());
    EXPECT_LE(*bound, exact->upper_seconds * (1 + kTolerance));
  }
}

TEST(ExactReferenceTest, RefusesLargeBatches) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  EXPECT_EQ(
      ComputeExactReference(cost_model, {}, std::vector<int64_t>(13, 1024))
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
