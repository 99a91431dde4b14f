// The DCP planner under ZeRO-3 (cost_model/memory_model.h,
// zero3_parameter_sharding): llama3-70b, whose replicated weights and
// gradients alone exceed an H200, plans on 4 and 8 nodes of 8 H200s, and the
// search weighs the collectives every micro-batch pays.
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cost_model/cost_model.h"
#include "gtest/gtest.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/plan.h"
#include "planner/plan/test_cost_model.h"
#include "planner/plan/validate.h"
#include "planner/search/lower_bound.h"
#include "planner/search/planner.h"

namespace dcp {
namespace {

// A long-tail batch of about 16K tokens per GPU: many 1-4K sequences and a
// few of 16-64K.
std::vector<int64_t> LongTailBatch(int num_gpus) {
  std::vector<int64_t> lengths;
  int64_t tokens = 0;
  for (int i = 0; tokens < int64_t{16384} * num_gpus; ++i) {
    const int64_t length =
        i % 50 == 0 ? 16384 << (i / 50 % 3) : 1024 + (i * 389) % 3072;
    lengths.push_back(length);
    tokens += length;
  }
  return lengths;
}

int MicroBatches(const Plan& plan) {
  int count = 0;
  for (const GroupPlan& group : plan.groups) {
    count += static_cast<int>(group.micro_batches.size());
  }
  return count;
}

TEST(PlannerZero3Test, PlansLlama70bOnFourAndEightNodes) {
  for (int nodes : {4, 8}) {
    SCOPED_TRACE(testing::Message() << nodes << " nodes");
    // Without ZeRO-3 the model state alone does not fit.
    EXPECT_EQ(CheckModelStateFits(MakeCostModel("llama3-70b", nodes, 8)).code(),
              absl::StatusCode::kResourceExhausted);
    const CostModel cost_model = MakeZero3CostModel("llama3-70b", nodes, 8);
    const std::vector<int64_t> lengths = LongTailBatch(nodes * 8);
    absl::StatusOr<Plan> plan = Planner(cost_model, PlannerOptions{}).PlanBatch(lengths);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(ValidatePlan(cost_model, lengths, *plan).ok())
        << ValidatePlan(cost_model, lengths, *plan);
    EXPECT_LE(MaxPeakBytes(*plan), cost_model.MemoryBudgetBytes());
    // No step-end all-reduce; the sharding collectives are in the groups'
    // time: each group pays them once per micro-batch.
    EXPECT_EQ(plan->exposed_allreduce_seconds, 0);
    const double sharding = cost_model.ShardingMicroBatchSeconds();
    ASSERT_GT(sharding, 0);
    for (const GroupPlan& group : plan->groups) {
      EXPECT_GE(group.predicted_seconds,
                sharding * static_cast<double>(group.micro_batches.size()));
    }
    // The lower bound counts them too, and stays below the plan.
    absl::StatusOr<double> bound =
        StepTimeLowerBound(cost_model, LegalSpSizes(cost_model, {}).value(),
                           lengths);
    ASSERT_TRUE(bound.ok()) << bound.status();
    EXPECT_LE(*bound, plan->predicted_step_seconds * (1 + 1e-9));
    EXPECT_GE(*bound, sharding);
  }
}

// The more a micro-batch's collectives cost, the fewer micro-batches the
// search picks: with them priced at zero (ZeRO-3 memory, free collectives)
// it may split freely; priced as on the NICs it packs tighter.
TEST(PlannerZero3Test, CostlyCollectivesMeanFewerMicroBatches) {
  const CostModel priced = MakeZero3CostModel("llama3-70b", 4, 8);
  CostParams free_params = priced.params();
  free_params.comm.all_gather_inter_latency_seconds = 0;
  free_params.comm.reduce_scatter_inter_latency_seconds = 0;
  free_params.comm.all_gather_inter_bus_bytes_per_second = 1e30;
  free_params.comm.reduce_scatter_inter_bus_bytes_per_second = 1e30;
  absl::StatusOr<CostModel> free = CostModel::Create(
      priced.model(), priced.cluster(), free_params);
  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_LT(free->ShardingMicroBatchSeconds(),
            1e-6 * priced.ShardingMicroBatchSeconds());
  const std::vector<int64_t> lengths = LongTailBatch(32);
  absl::StatusOr<Plan> with = Planner(priced, PlannerOptions{}).PlanBatch(lengths);
  absl::StatusOr<Plan> without = Planner(*free, PlannerOptions{}).PlanBatch(lengths);
  ASSERT_TRUE(with.ok()) << with.status();
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_LE(MicroBatches(*with), MicroBatches(*without));
  EXPECT_GT(with->predicted_step_seconds, without->predicted_step_seconds);
}

// Under ZeRO-3 every micro-batch pays the sharding collectives, so the plans
// with one common accumulation count (or one recompute setting) are searched
// too: the default search is never slower than those restrictions of it.
TEST(PlannerZero3Test, NeverSlowerThanItsRestrictions) {
  for (int nodes : {4, 8}) {
    SCOPED_TRACE(testing::Message() << nodes << " nodes");
    const CostModel cost_model = MakeZero3CostModel("llama3-70b", nodes, 8);
    const std::vector<int64_t> lengths = LongTailBatch(nodes * 8);
    absl::StatusOr<Plan> plan =
        Planner(cost_model, PlannerOptions{}).PlanBatch(lengths);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (const auto& [variable, pyramid] :
         {std::pair{false, true}, std::pair{true, false},
          std::pair{false, false}}) {
      SCOPED_TRACE(testing::Message() << "variable accumulation " << variable
                                      << ", pyramid recompute " << pyramid);
      PlannerOptions restricted;
      restricted.variable_accumulation = variable;
      restricted.pyramid_recompute = pyramid;
      absl::StatusOr<Plan> other =
          Planner(cost_model, restricted).PlanBatch(lengths);
      ASSERT_TRUE(other.ok()) << other.status();
      EXPECT_LE(plan->predicted_step_seconds,
                other->predicted_step_seconds * (1 + 1e-9));
    }
  }
}

}  // namespace
}  // namespace dcp
