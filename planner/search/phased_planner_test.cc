#include "planner/search/phased_planner.h"

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "cost_model/cost_model.h"
#include "gtest/gtest.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan_testing.h"
#include "planner/plan/test_cost_model.h"
#include "planner/search/lower_bound.h"
#include "planner/search/planner.h"
#include "planner/workload/workload.h"
#include "planner/workload/workload_testing.h"

namespace dcp {
namespace {

constexpr double kTolerance = 1e-9;

PhasedPlannerOptions DefaultOptions() {
  PhasedPlannerOptions options;
  options.planner_options.strategy_name = "dcp-phased";
  return options;
}

// A few long sequences among many short ones (where one layout per step
// puts short sequences on the long ones' large groups).
std::vector<int64_t> LongAmongShort() {
  std::vector<int64_t> lengths = {131072, 65536};
  for (int i = 0; i < 60; ++i) lengths.push_back(1024 + 64 * (i % 7));
  return lengths;
}

TEST(PhasedPlannerTest, NeverSlowerThanTheSingleLayoutPlanAndValid) {
  const CostModel cost_model =
      MakeCostModel("llama3-8b", /*num_nodes=*/2, /*gpus_per_node=*/8);
  const std::vector<std::vector<int64_t>> batches = {
      LongAmongShort(),
      {32768, 16384, 8192, 4096, 2048, 1024, 512, 512},
      {4096, 4096, 4096, 4096},
      {65536},
      {16384, 700, 900, 1100, 1300, 1500, 1700, 1900, 2100, 2300}};
  for (const std::vector<int64_t>& lengths : batches) {
    SCOPED_TRACE(lengths.size());
    const PhasedPlannerOptions options = DefaultOptions();
    absl::StatusOr<Plan> single =
        Planner(cost_model, options.planner_options).PlanBatch(lengths);
    ASSERT_TRUE(single.ok()) << single.status();
    PredictPlan(cost_model, lengths, *single);
    absl::StatusOr<PhasedPlan> phased =
        PlanPhasedBatch(cost_model, lengths, options);
    ASSERT_TRUE(phased.ok()) << phased.status();
    EXPECT_EQ(phased->strategy, "dcp-phased");
    ASSERT_TRUE(IsValidPhasedPlan(cost_model, lengths, *phased));
    ASSERT_GE(phased->phases.size(), 1u);
    ASSERT_LE(phased->phases.size(), 2u);
    EXPECT_LE(phased->predicted_step_seconds,
              single->predicted_step_seconds * (1 + kTolerance));
    // Its predictions are PredictPhasedPlan's.
    PhasedPlan repriced = *phased;
    PredictPhasedPlan(cost_model, lengths, repriced);
    EXPECT_DOUBLE_EQ(repriced.predicted_step_seconds,
                     phased->predicted_step_seconds);
    // One phase is the single-layout plan itself.
    if (phased->phases.size() == 1) {
      EXPECT_DOUBLE_EQ(phased->predicted_step_seconds,
                       single->predicted_step_seconds);
    }
    EXPECT_GT(phased->lower_bound_seconds, 0);
    EXPECT_LE(phased->lower_bound_seconds,
              phased->predicted_step_seconds * (1 + kTolerance));
  }
}

TEST(PhasedPlannerTest, Deterministic) {
  const CostModel cost_model =
      MakeCostModel("llama3-8b", /*num_nodes=*/2, /*gpus_per_node=*/8);
  const std::vector<int64_t> lengths = LongAmongShort();
  absl::StatusOr<PhasedPlan> first =
      PlanPhasedBatch(cost_model, lengths, DefaultOptions());
  absl::StatusOr<PhasedPlan> second =
      PlanPhasedBatch(cost_model, lengths, DefaultOptions());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  ExpectSamePhasedPlan(*second, *first);
}

// The lower bound bounds phased plans too: on small batches, every split
// into two phases (each planned by the single-layout planner) is priced at
// or above it, as is the phased search's choice.
TEST(PhasedPlannerTest, LowerBoundBoundsEveryTwoPhaseSplit) {
  for (const int nodes : {1, 2}) {
    const CostModel cost_model =
        MakeCostModel("llama3-8b", nodes, /*gpus_per_node=*/8);
    const std::vector<std::vector<int64_t>> batches = {
        {65536, 2048, 1024, 1024, 512, 512, 256},
        {32768, 32768, 4096, 1024, 1024, 1024},
        {131072, 8192, 8192, 2048, 2048, 2048, 2048, 2048}};
    for (const std::vector<int64_t>& lengths : batches) {
      SCOPED_TRACE(lengths.size());
      absl::StatusOr<double> bound = StepTimeLowerBound(
          cost_model, LegalSpSizes(cost_model, {}).value(), lengths);
      ASSERT_TRUE(bound.ok()) << bound.status();
      const Planner planner(cost_model, PlannerOptions{});
      const int n = static_cast<int>(lengths.size());
      for (int mask = 1; mask + 1 < (1 << n); ++mask) {
        PhasedPlan plan;
        for (const bool first_phase : {true, false}) {
          std::vector<int> members;
          std::vector<int64_t> phase_lengths;
          for (int i = 0; i < n; ++i) {
            if (((mask >> i) & 1) == first_phase) {
              members.push_back(i);
              phase_lengths.push_back(lengths[i]);
            }
          }
          absl::StatusOr<Plan> phase = planner.PlanBatch(phase_lengths);
          ASSERT_TRUE(phase.ok()) << phase.status();
          for (GroupPlan& group : phase->groups) {
            for (MicroBatchPlan& micro_batch : group.micro_batches) {
              for (int& index : micro_batch.sequence_indices) {
                index = members[index];
              }
            }
          }
          plan.phases.push_back(*std::move(phase));
        }
        PredictPhasedPlan(cost_model, lengths, plan);
        EXPECT_LE(*bound, plan.predicted_step_seconds * (1 + kTolerance))
            << "split " << mask;
      }
      absl::StatusOr<PhasedPlan> phased =
          PlanPhasedBatch(cost_model, lengths, DefaultOptions());
      ASSERT_TRUE(phased.ok()) << phased.status();
      EXPECT_NEAR(phased->lower_bound_seconds, *bound, kTolerance * *bound);
      EXPECT_LE(*bound, phased->predicted_step_seconds * (1 + kTolerance));
    }
  }
}

// Lengths of the `step`-th batch of `spec`'s stream, of `tokens` tokens.
std::vector<int64_t> WorkloadBatch(const std::string& spec, int64_t tokens,
                                   int step) {
  BatchStream stream =
      MakeSpecStream(spec, /*global_batch_tokens=*/tokens, /*seed=*/3);
  std::vector<int64_t> lengths;
  for (int i = 0; i <= step; ++i) {
    lengths.clear();
    for (const Sample& sample : stream.Next()) {
      lengths.push_back(sample.length_tokens);
    }
  }
  return lengths;
}

// Skipping the candidates whose bounds cannot win finds the very plan the
// exhaustive search finds, on the workloads the product plans.
TEST(PhasedPlannerTest, SkippingBoundedCandidatesKeepsTheResult) {
  const CostModel cost_model =
      MakeCostModel("llama3-8b", /*num_nodes=*/2, /*gpus_per_node=*/8);
  int phased_results = 0;
  for (const std::string spec : {"longtail", "bimodal", "uniform"}) {
    for (int step = 0; step < 3; ++step) {
      const std::vector<int64_t> lengths =
          WorkloadBatch(spec, /*tokens=*/16 * 65536, step);
      SCOPED_TRACE(spec + " step " + std::to_string(step));
      PhasedPlannerOptions options = DefaultOptions();
      options.min_gap_to_try = 0;
      // No budget: the claim is the same plan within the budget.
      options.batches_planned = 1e9;
      options.max_sequences_planned = int64_t{1} << 40;
      absl::StatusOr<PhasedPlan> skipping =
          PlanPhasedBatch(cost_model, lengths, options);
      options.skip_bounded_candidates = false;
      absl::StatusOr<PhasedPlan> exhaustive =
          PlanPhasedBatch(cost_model, lengths, options);
      ASSERT_TRUE(skipping.ok()) << skipping.status();
      ASSERT_TRUE(exhaustive.ok()) << exhaustive.status();
      ExpectSamePhasedPlan(*skipping, *exhaustive);
      phased_results += skipping->phases.size() > 1 ? 1 : 0;
    }
  }
  // The comparison covers two-phase results, not only single layouts.
  EXPECT_GT(phased_results, 0);
}

// The budget bounds the search: none at all keeps the single layout, and
// the default one finds no slower a plan than that.
TEST(PhasedPlannerTest, TheBudgetBoundsTheSearch) {
  const CostModel cost_model =
      MakeCostModel("llama3-8b", /*num_nodes=*/2, /*gpus_per_node=*/8);
  const std::vector<int64_t> lengths =
      WorkloadBatch("longtail", /*tokens=*/16 * 65536, /*step=*/0);
  PhasedPlannerOptions options = DefaultOptions();
  options.min_gap_to_try = 0;
  options.batches_planned = 0;
  options.min_sequences_planned = 0;
  absl::StatusOr<PhasedPlan> none =
      PlanPhasedBatch(cost_model, lengths, options);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->phases.size(), 1u);
  const PhasedPlannerOptions defaults = [] {
    PhasedPlannerOptions o = DefaultOptions();
    o.min_gap_to_try = 0;
    return o;
  }();
  absl::StatusOr<PhasedPlan> searched =
      PlanPhasedBatch(cost_model, lengths, defaults);
  ASSERT_TRUE(searched.ok()) << searched.status();
  EXPECT_LE(searched->predicted_step_seconds, none->predicted_step_seconds);
}

// Below the least gap worth a search the single-layout plan is returned as
// it is; at a gap of 0 the same batch is searched and may split.
TEST(PhasedPlannerTest, SmallGapsKeepTheSingleLayout) {
  const CostModel cost_model =
      MakeCostModel("llama3-8b", /*num_nodes=*/2, /*gpus_per_node=*/8);
  PhasedPlannerOptions options = DefaultOptions();
  options.min_gap_to_try = 0;
  // The first long-tail batch the search splits.
  std::vector<int64_t> lengths;
  absl::StatusOr<PhasedPlan> searched;
  for (int step = 0; step < 3; ++step) {
    lengths = WorkloadBatch("longtail", /*tokens=*/16 * 65536, step);
    searched = PlanPhasedBatch(cost_model, lengths, options);
    ASSERT_TRUE(searched.ok()) << searched.status();
    if (searched->phases.size() == 2) break;
  }
  ASSERT_EQ(searched->phases.size(), 2u);
  absl::StatusOr<Plan> single =
      Planner(cost_model, options.planner_options).PlanBatch(lengths);
  ASSERT_TRUE(single.ok());
  PredictPlan(cost_model, lengths, *single);
  // A least gap just above the single layout's own.
  options.min_gap_to_try =
      single->predicted_step_seconds / searched->lower_bound_seconds - 1 +
      1e-6;
  absl::StatusOr<PhasedPlan> kept =
      PlanPhasedBatch(cost_model, lengths, options);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->phases.size(), 1u);
  EXPECT_EQ(kept->predicted_step_seconds, single->predicted_step_seconds);
  EXPECT_EQ(kept->lower_bound_seconds, searched->lower_bound_seconds);
}

TEST(PhasedPlannerTest, PlannerErrorsPassThrough) {
  const CostModel cost_model =
      MakeCostModel("llama3-8b", /*num_nodes=*/1, /*gpus_per_node=*/8);
  const std::vector<int64_t> empty;
  EXPECT_FALSE(PlanPhasedBatch(cost_model, empty, DefaultOptions()).ok());
  const std::vector<int64_t> negative = {1024, -5};
  EXPECT_EQ(PlanPhasedBatch(cost_model, negative, DefaultOptions())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
