// The DCP planner under ZeRO-3 (cost_model/memory_model.h,
// zero3_parameter_sharding): llama3-70b, whose replicated weights and
// gradients alone exceed an H200, plans on 4 and 8 nodes of 8 H200s, and the
// search weighs the collectives every micro-batch pays.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cost_model/cost_model.h"
#include "gtest/gtest.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/plan.h"
#include "planner/plan/plan_testing.h"
#include "planner/plan/test_cost_model.h"
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
    EXPECT_TRUE(IsValidPlan(cost_model, lengths, *plan));
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

// Under ZeRO-3 the groups run in lockstep: a group with fewer micro-batches
// pads first, and the k-th micro-batches of all groups end together.
TEST(PlannerZero3Test, GroupsRunInLockstep) {
  const CostModel cost_model = MakeZero3CostModel("llama3-70b", 4, 8);
  const std::vector<int64_t> lengths = {1024, 4096, 8192, 65536, 2048};
  auto micro_batch = [](std::vector<int> indices) {
    MicroBatchPlan micro;
    micro.sequence_indices = std::move(indices);
    micro.checkpointed_layers = 80;
    return micro;
  };
  Plan plan;
  GroupPlan three;  // three micro-batches, short ones
  for (int r = 0; r < 8; ++r) three.ranks.push_back(r);
  three.micro_batches = {micro_batch({0}), micro_batch({1}), micro_batch({2})};
  GroupPlan one;  // one long micro-batch
  for (int r = 8; r < 16; ++r) one.ranks.push_back(r);
  one.micro_batches = {micro_batch({3, 4})};
  plan.groups = {three, one};
  PredictPlan(cost_model, lengths, plan);
  const std::vector<MicroBatchPlan>& a = plan.groups[0].micro_batches;
  const double b = plan.groups[1].micro_batches[0].predicted_seconds;
  MicroBatchShape padding;
  padding.sp_size = 8;
  padding.AddSequence(1024);
  const double pad = cost_model.MicroBatch(padding, 0).total_seconds;
  const double lockstep = std::max(a[0].predicted_seconds, pad) +
                          std::max(a[1].predicted_seconds, pad) +
                          std::max(a[2].predicted_seconds, b);
  EXPECT_DOUBLE_EQ(LockstepSeconds(cost_model, lengths, plan), lockstep);
  EXPECT_DOUBLE_EQ(plan.slowest_group_seconds, lockstep);
  EXPECT_GT(lockstep, std::max(plan.groups[0].predicted_seconds,
                               plan.groups[1].predicted_seconds));
  EXPECT_DOUBLE_EQ(plan.predicted_step_seconds,
                   lockstep + cost_model.OptimizerStepSeconds());
  // Without ZeRO-3 every group runs on its own.
  const CostModel replicated = MakeCostModel("llama3-8b", 4, 8);
  PredictPlan(replicated, lengths, plan);
  EXPECT_DOUBLE_EQ(plan.slowest_group_seconds,
                   std::max(plan.groups[0].predicted_seconds,
                            plan.groups[1].predicted_seconds));
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
  EXPECT_LE(MicroBatchCount(*with), MicroBatchCount(*without));
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
