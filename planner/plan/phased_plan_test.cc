#include "planner/plan/phased_plan.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "planner/plan/plan.h"
#include "planner/plan/plan_testing.h"
#include "planner/plan/test_cost_model.h"

namespace dcp {
namespace {

MicroBatchPlan MicroBatch(std::vector<int> indices, int layers = 0) {
  MicroBatchPlan micro_batch;
  micro_batch.sequence_indices = std::move(indices);
  micro_batch.checkpointed_layers = layers;
  return micro_batch;
}

// 1 x 4 GPUs: a phase with one SP-4 group, then one with four SP-1 groups.
PhasedPlan TwoPhases() {
  PhasedPlan plan;
  Plan wide;
  wide.groups.push_back({{0, 1, 2, 3}, {MicroBatch({0})}, 0});
  Plan narrow;
  for (int r = 0; r < 4; ++r) {
    narrow.groups.push_back({{r}, {MicroBatch({1 + r})}, 0});
  }
  plan.phases = {wide, narrow};
  return plan;
}

const std::vector<int64_t> kLengths = {16384, 4096, 4096, 2048, 1024};

TEST(PhasedPlanTest, OnePhaseIsPricedAsItsPlan) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 4);
  Plan plan;
  plan.groups.push_back({{0, 1}, {MicroBatch({0}), MicroBatch({1})}, 0});
  plan.groups.push_back({{2, 3}, {MicroBatch({2, 3, 4})}, 0});
  PhasedPlan phased;
  phased.phases = {plan};
  PredictPlan(cost_model, kLengths, plan);
  PredictPhasedPlan(cost_model, kLengths, phased);
  EXPECT_DOUBLE_EQ(phased.predicted_step_seconds, plan.predicted_step_seconds);
  EXPECT_DOUBLE_EQ(phased.exposed_allreduce_seconds,
                   plan.exposed_allreduce_seconds);
  EXPECT_DOUBLE_EQ(MeanIdleFraction(phased), MeanIdleFraction(plan));
  EXPECT_DOUBLE_EQ(MaxPeakBytes(phased), MaxPeakBytes(plan));
}

// A plan already priced is the phased plan PredictPhasedPlan makes of it,
// bit for bit, ZeRO-3's lockstep included.
TEST(PhasedPlanTest, AsOnePhaseIsThePlanPricedAsOnePhase) {
  for (const CostModel& cost_model : {MakeCostModel("llama3-8b", 1, 4),
                                      MakeZero3CostModel("llama3-8b", 1, 4)}) {
    Plan plan;
    plan.strategy = "dcp";
    plan.groups.push_back({{0, 1}, {MicroBatch({0}), MicroBatch({1})}, 0});
    plan.groups.push_back({{2, 3}, {MicroBatch({2, 3, 4})}, 0});
    PredictPlan(cost_model, kLengths, plan);
    plan.lower_bound_seconds = 0.5;
    PhasedPlan priced;
    priced.strategy = plan.strategy;
    priced.phases = {plan};
    PredictPhasedPlan(cost_model, kLengths, priced);
    priced.lower_bound_seconds = plan.lower_bound_seconds;
    ExpectSamePhasedPlan(AsOnePhase(plan), priced);
  }
}

// step = slowest group + exposed all-reduce + optimizer step, the optimizer
// step (its H200 default: AdamW over llama3-8b's parameters, tens of ms)
// once per step however many phases the step runs.
TEST(PhasedPlanTest, TheOptimizerStepIsPricedOncePerStep) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 4);
  const double optimizer = cost_model.OptimizerStepSeconds();
  EXPECT_GT(optimizer, 10e-3);
  EXPECT_LT(optimizer, 1.0);
  Plan plan;
  plan.groups.push_back({{0, 1, 2, 3}, {MicroBatch({0}), MicroBatch({1})}, 0});
  PredictPlan(cost_model, kLengths, plan);
  EXPECT_NEAR(plan.predicted_step_seconds - plan.slowest_group_seconds -
                  plan.exposed_allreduce_seconds,
              optimizer, 1e-12);
  PhasedPlan phased = TwoPhases();
  PredictPhasedPlan(cost_model, kLengths, phased);
  EXPECT_NEAR(phased.predicted_step_seconds - phased.phases_seconds -
                  phased.exposed_allreduce_seconds,
              optimizer, 1e-12);
}

TEST(PhasedPlanTest, BarriersSumThePhasesSlowestGroups) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 4);
  PhasedPlan plan = TwoPhases();
  PredictPhasedPlan(cost_model, kLengths, plan);
  const double wide = plan.phases[0].slowest_group_seconds;
  const double narrow = plan.phases[1].slowest_group_seconds;
  EXPECT_GT(wide, 0);
  // The slowest SP-1 group runs a 4096-token sequence.
  EXPECT_DOUBLE_EQ(narrow, plan.phases[1].groups[0].predicted_seconds);
  EXPECT_DOUBLE_EQ(plan.phases_seconds, wide + narrow);
  EXPECT_DOUBLE_EQ(plan.exposed_allreduce_seconds,
                   plan.phases[1].exposed_allreduce_seconds);
  EXPECT_DOUBLE_EQ(plan.predicted_step_seconds,
                   wide + narrow + plan.exposed_allreduce_seconds +
                       cost_model.OptimizerStepSeconds());
  // Only the narrow phase's shorter sequences leave GPUs waiting.
  double idle = 0;
  for (const GroupPlan& group : plan.phases[1].groups) {
    idle += narrow - group.predicted_seconds;
  }
  EXPECT_NEAR(MeanIdleFraction(plan), idle / (4 * (wide + narrow)), 1e-12);
  EXPECT_TRUE(ValidatePhasedPlan(cost_model, kLengths, plan).ok());
}

TEST(PhasedPlanTest, ValidationNamesTheProblem) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 4);
  PhasedPlan twice = TwoPhases();
  twice.phases[1].groups[0].micro_batches[0].sequence_indices = {0};
  absl::Status status = ValidatePhasedPlan(cost_model, kLengths, twice);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      status.message().find("sequence 0 is planned twice (phases 0 and 1)"),
      std::string::npos)
      << status;
  EXPECT_NE(status.message().find("in no phase"), std::string::npos) << status;

  PhasedPlan missing_rank = TwoPhases();
  missing_rank.phases[1].groups.pop_back();
  missing_rank.phases[1].groups[0].micro_batches.push_back(MicroBatch({4}));
  status = ValidatePhasedPlan(cost_model, kLengths, missing_rank);
  EXPECT_NE(status.message().find("phase 1: "), std::string::npos) << status;
  EXPECT_NE(status.message().find("in no group"), std::string::npos) << status;

  PhasedPlan too_big = TwoPhases();
  too_big.phases[0].groups[0].micro_batches[0].sequence_indices = {1};
  too_big.phases[1].groups[0].micro_batches[0].sequence_indices = {0};
  status = ValidatePhasedPlan(cost_model, {1 << 20, 4096, 4096, 2048, 1024},
                              too_big);
  EXPECT_NE(status.message().find("exceeds the budget"), std::string::npos)
      << status;

  EXPECT_FALSE(ValidatePhasedPlan(cost_model, kLengths, PhasedPlan{}).ok());
}

TEST(PhasedPlanTest, PhaseAsBatchRenumbersItsSequences) {
  const PhaseBatch batch = PhaseAsBatch(kLengths, TwoPhases().phases[1]);
  EXPECT_EQ(batch.lengths_tokens,
            (std::vector<int64_t>{4096, 4096, 2048, 1024}));
  ASSERT_EQ(batch.plan.groups.size(), 4u);
  for (int g = 0; g < 4; ++g) {
    EXPECT_EQ(batch.plan.groups[g].micro_batches[0].sequence_indices,
              std::vector<int>({g}));
    EXPECT_EQ(batch.plan.groups[g].ranks, std::vector<int>({g}));
  }
}

TEST(PhasedPlanTest, LayOutPhasePlacesGroupsAndIdlesTheRest) {
  ClusterSpec cluster = H200Cluster(2, 4);
  std::vector<PhaseGroup> groups(2);
  groups[0].sp_size = 2;
  groups[0].micro_batches = {MicroBatch({0})};
  groups[1].sp_size = 4;
  groups[1].micro_batches = {MicroBatch({1}), MicroBatch({2})};
  absl::StatusOr<Plan> phase = LayOutPhase(cluster, groups);
  ASSERT_TRUE(phase.ok()) << phase.status();
  ASSERT_EQ(phase->groups.size(), 4u);
  EXPECT_EQ(phase->groups[0].ranks, (std::vector<int>{4, 5}));
  EXPECT_EQ(phase->groups[1].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(phase->groups[1].micro_batches.size(), 2u);
  EXPECT_EQ(phase->groups[2].ranks, (std::vector<int>{6}));
  EXPECT_TRUE(phase->groups[3].micro_batches.empty());
  groups[1].sp_size = 8;
  EXPECT_EQ(LayOutPhase(cluster, groups).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace dcp
