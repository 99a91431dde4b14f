// The planner's search on small batches against the exhaustive optimum
// (planner/exact/exact_reference.h): batches where the search before the
// refinement moves for small batches (swaps, splitting two groups'
// sequences anew, changing one group's SP size, several starting layouts)
// was measurably slower than the optimum, and where it now reaches it.
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "cost_model/cost_model.h"
#include "gtest/gtest.h"
#include "planner/exact/exact_reference.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/plan.h"
#include "planner/plan/plan_json.h"
#include "planner/plan/test_cost_model.h"
#include "planner/plan/validate.h"
#include "planner/search/lower_bound.h"
#include "planner/search/planner.h"
#include "planner/workload/workload.h"
#include "planner/workload/workload_testing.h"

namespace dcp {
namespace {

constexpr double kRelativeTolerance = 1e-9;

struct Outcome {
  Plan plan;
  double optimum_seconds = 0;
};

Outcome PlanAndOptimum(const CostModel& cost_model,
                       const std::vector<int64_t>& lengths) {
  Outcome outcome;
  absl::StatusOr<Plan> plan = Planner(cost_model, {}).PlanBatch(lengths);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (plan.ok()) outcome.plan = *plan;
  absl::Status valid = ValidatePlan(cost_model, lengths, outcome.plan);
  EXPECT_TRUE(valid.ok()) << valid;
  absl::StatusOr<ExactReference> exact =
      ComputeExactReference(cost_model, {}, lengths);
  EXPECT_TRUE(exact.ok()) << exact.status();
  if (exact.ok()) outcome.optimum_seconds = exact->upper_seconds;
  return outcome;
}

TEST(PlannerSearchTest, SwapsAndResplitsReachTheOptimumOnTwoSpEightGroups) {
  // Uniform 8K-64K on 2 x 8 H200 (exact_gap's row, batch 3 of seed 1): both
  // plans use two SP-8 groups, but moving one sequence at a time out of
  // the slowest group stopped at 3.418 s; the optimum (3.274 s) exchanges
  // sequences and splits the two groups' sequences anew (4.4% better).
  const CostModel cost_model = MakeCostModel("llama3-8b", 2, 8);
  const std::vector<int64_t> lengths = {39470, 20172, 34079, 51745, 57568,
                                        44306, 64511, 16913, 15686, 35532};
  const Outcome outcome = PlanAndOptimum(cost_model, lengths);
  EXPECT_LE(outcome.plan.predicted_step_seconds,
            outcome.optimum_seconds * (1 + kRelativeTolerance));
  // (Those figures before the optimizer step was priced.)
  EXPECT_LT(outcome.plan.predicted_step_seconds,
            3.3 + cost_model.OptimizerStepSeconds());
  absl::StatusOr<double> bound =
      StepTimeLowerBound(cost_model, *LegalSpSizes(cost_model, {}), lengths);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_LE(*bound, outcome.plan.predicted_step_seconds);
}

TEST(PlannerSearchTest, ChangingOneGroupsSpSizeReachesTheOptimum) {
  // Long-tail on 1 x 8 (exact_gap's row, batch 8 of seed 1): the search
  // kept SP 4 + 2 + 1 + 1 at 0.2622 s; the optimum splits the SP-2 group
  // into two SP-1 groups (0.2578 s, 1.7% better).
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = {2133, 1579, 431,  2015, 11002, 1480,
                                        1121, 2208, 528,  1194, 1471,  837};
  const Outcome outcome = PlanAndOptimum(cost_model, lengths);
  EXPECT_LE(outcome.plan.predicted_step_seconds,
            outcome.optimum_seconds * (1 + kRelativeTolerance));
  EXPECT_LT(outcome.plan.predicted_step_seconds,
            0.26 + cost_model.OptimizerStepSeconds());
  // Priced with two all-to-alls per layer pass, as the workers run them
  // (the search was tuned on four), SP 2 pays half the latencies, and the
  // optimum keeps two SP-1 groups.
  int sp_one_groups = 0;
  for (const GroupPlan& group : outcome.plan.groups) {
    sp_one_groups += group.sp_size() == 1;
  }
  EXPECT_GE(sp_one_groups, 2);
}

TEST(PlannerSearchTest, WithinThreePercentOfTheBoundOnAChatLikeMix) {
  // A chat-SFT-like mix (median 640 tokens, 1% past 8K, 32K context; the
  // README's "Closing the gaps") on 4 x 8, 4 batches. Against the bound
  // that counts the micro-batches' fixed costs (the old one was 3.4-3.9%
  // below dcp here), the old search was 1.80%, 1.43%, 1.38% and 2.99% from
  // it (mean 1.90%); the estimates with each sequence's share of those
  // fixed costs and the layout candidates by least GPU-seconds (the
  // 12K-17K sequences SP 1 holds only with recompute are cheaper on SP 2)
  // bring it to 1.40%, 1.23%, 1.15% and 2.63% (mean 1.60%).
  // The figures above were measured before the H200 defaults counted the
  // NCCL communicators (3 GB less for activations); they are kept by
  // planning against the same memory, without communicators, so the
  // comparison with the old search stays exact.
  absl::StatusOr<ModelSpec> model = ModelPreset("llama3-8b");
  ASSERT_TRUE(model.ok()) << model.status();
  const ClusterSpec cluster = H200Cluster(4, 8);
  CostParams params = DefaultCostParams(*model, cluster);
  SetCommunicatorMemory(CommunicatorBackend::kGloo, 0, params.memory);
  absl::StatusOr<CostModel> created =
      CostModel::Create(*model, cluster, params);
  ASSERT_TRUE(created.ok()) << created.status();
  const CostModel& cost_model = *created;
  BatchStream stream = MakeSpecStream(
      "longtail:median=640,sigma=1.1,tail_fraction=0.01,tail_min=8192,"
      "alpha=1.5,max=32768",
      /*global_batch_tokens=*/int64_t{2} << 20, /*seed=*/1);
  PlannerOptions options;
  options.static_options.workload_max_length_tokens =
      stream.source().MaxLengthTokens();
  double sum_gaps = 0;
  for (int step = 0; step < 4; ++step) {
    std::vector<int64_t> lengths;
    for (const Sample& sample : stream.Next()) {
      lengths.push_back(sample.length_tokens);
    }
    absl::StatusOr<Plan> plan = Planner(cost_model, options).PlanBatch(lengths);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(ValidatePlan(cost_model, lengths, *plan).ok());
    // Two all-to-alls per layer pass (as the workers run them; the figures
    // above were measured with four): batch 3 is 3.4% from the bound.
    EXPECT_LT(plan->GapToLowerBound(), 0.035) << "batch " << step;
    sum_gaps += plan->GapToLowerBound();
  }
  EXPECT_LT(sum_gaps / 4, 0.018);
}

TEST(PlannerSearchTest, SmallBatchSearchIsDeterministic) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 2, 8);
  const std::vector<int64_t> lengths = {11086, 16900, 21031, 50694, 19101,
                                        63868, 17111, 36656, 59392, 44339};
  absl::StatusOr<Plan> first = Planner(cost_model, {}).PlanBatch(lengths);
  absl::StatusOr<Plan> second = Planner(cost_model, {}).PlanBatch(lengths);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(PlanToJson(*first, lengths, cost_model),
            PlanToJson(*second, lengths, cost_model));
}

}  // namespace
}  // namespace dcp
