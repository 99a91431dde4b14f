#include "planner/simulate/strategy_registry.h"

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"
#include "planner/plan/plan_testing.h"
#include "planner/plan/test_cost_model.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

std::vector<int64_t> MixedBatch() {
  std::vector<int64_t> lengths = {65536, 32768, 16384};
  for (int i = 0; i < 40; ++i) lengths.push_back(1024 + 512 * (i % 5));
  return lengths;
}

// Every name makes a strategy of that name whose plans are of the kind it
// declares, named after it, valid, within memory and priced.
TEST(StrategyRegistryTest, EveryNamedStrategyPlansValidPricedPlans) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = MixedBatch();
  ASSERT_EQ(StrategyNames().size(), 11u);
  for (const std::string& name : StrategyNames()) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::unique_ptr<Strategy>> strategy =
        MakeStrategy(name, cost_model, StrategyOptions());
    ASSERT_TRUE(strategy.ok()) << strategy.status();
    EXPECT_EQ((*strategy)->name(), name);
    if ((*strategy)->tuned_over_run()) {
      ASSERT_TRUE((*strategy)->Tune({lengths, lengths}).ok());
      EXPECT_FALSE((*strategy)->setting().empty());
    }
    absl::StatusOr<StrategyPlan> plan = (*strategy)->PlanBatch(lengths);
    ASSERT_TRUE(plan.ok()) << plan.status();
    // A strategy that may re-group returns one layout as a Plan where it
    // does not (dcp), or always as phases (dcp-phased, the peers').
    EXPECT_GT(plan->predicted_step_seconds(), 0);
    if (plan->IsPhased()) {
      EXPECT_TRUE((*strategy)->phased());
      EXPECT_EQ(plan->phased.strategy, name);
      for (const Plan& phase : plan->phased.phases) {
        EXPECT_EQ(phase.strategy, name);
      }
      EXPECT_TRUE(IsValidPhasedPlan(cost_model, lengths, plan->phased));
    } else {
      EXPECT_EQ(plan->plan.strategy, name);
      EXPECT_TRUE(IsValidPlan(cost_model, lengths, plan->plan));
    }
  }
}

// The dev-branch scheduler's rounds run without barriers; the main-branch
// one's at barriers; the flag travels with the plan so pricing agrees.
TEST(StrategyRegistryTest, MegatronSchedulersDeclareTheirBarriers) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = MixedBatch();
  for (const auto& [name, barriers] :
       std::vector<std::pair<std::string, bool>>{{"megatron-dyncp", false},
                                                 {"megatron-hcp", true}}) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::unique_ptr<Strategy>> strategy =
        MakeStrategy(name, cost_model, StrategyOptions());
    ASSERT_TRUE(strategy.ok());
    absl::StatusOr<StrategyPlan> plan = (*strategy)->PlanBatch(lengths);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->phased.barriers, barriers);
    PhasedPlan repriced = plan->phased;
    PredictPhasedPlan(cost_model, lengths, repriced);
    EXPECT_DOUBLE_EQ(repriced.predicted_step_seconds,
                     plan->phased.predicted_step_seconds);
  }
}

// Without barriers a phase's group starts as soon as its own ranks are
// free, so the step is never longer than the same phases at barriers.
TEST(StrategyRegistryTest, UnbarrieredPricingIsAtMostBarriered) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = MixedBatch();
  absl::StatusOr<std::unique_ptr<Strategy>> strategy =
      MakeStrategy("megatron-dyncp", cost_model, StrategyOptions());
  ASSERT_TRUE(strategy.ok());
  absl::StatusOr<StrategyPlan> plan = (*strategy)->PlanBatch(lengths);
  ASSERT_TRUE(plan.ok()) << plan.status();
  PhasedPlan with_barriers = plan->phased;
  with_barriers.barriers = true;
  PredictPhasedPlan(cost_model, lengths, with_barriers);
  EXPECT_LE(plan->phased.phases_seconds,
            with_barriers.phases_seconds * (1 + 1e-12));
}

TEST(StrategyRegistryTest, UnknownNameListsTheValidOnes) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  absl::StatusOr<std::unique_ptr<Strategy>> strategy =
      MakeStrategy("megatron", cost_model, StrategyOptions());
  ASSERT_FALSE(strategy.ok());
  EXPECT_EQ(strategy.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(strategy.status().message(),
              HasSubstr("unknown strategy 'megatron'"));
  EXPECT_THAT(strategy.status().message(), HasSubstr("megatron-hcp"));
}

}  // namespace
}  // namespace dcp
