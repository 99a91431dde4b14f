#include "planner/exact/milp_reference.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "planner/exact/exact_reference.h"
#include "planner/exact/exact_testing.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/test_cost_model.h"
#include "planner/search/lower_bound.h"
#include "planner/search/planner.h"
#include "planner/strategies/baselines.h"

namespace dcp {
namespace {

// CBC proves each layout to this relative gap.
constexpr double kGap = 1e-6;
constexpr double kTolerance = 1e-6;

MilpReferenceOptions TestOptions() {
  MilpReferenceOptions options;
  options.relative_gap = kGap;
  options.layout_time_limit_seconds = 60;
  return options;
}

// The plan is valid and PredictPlan gives the reported step.
void ExpectValidAndPriced(const CostModel& cost_model,
                          const std::vector<int64_t>& lengths,
                          const MilpReference& milp) {
  ASSERT_FALSE(milp.best_plan.groups.empty());
  ExpectValidAndPricedAt(cost_model, lengths, milp.best_plan,
                         milp.upper_seconds, kTolerance);
}

TEST(MilpReferenceTest, TwoGpusTwoSequencesMatchesTheExhaustiveSearch) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 2);
  const std::vector<int64_t> lengths = {4096, 4096};
  absl::StatusOr<MilpReference> milp =
      ComputeMilpReference(cost_model, {}, lengths, TestOptions());
  ASSERT_TRUE(milp.ok()) << milp.status();
  absl::StatusOr<ExactReference> exact =
      ComputeExactReference(cost_model, {}, lengths);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_TRUE(milp->proven);
  EXPECT_EQ(milp->layouts, 2);
  ExpectValidAndPriced(cost_model, lengths, *milp);
  EXPECT_NEAR(milp->upper_seconds, exact->upper_seconds,
              kTolerance * exact->upper_seconds);
}

// Random small batches: the MILP's optimum lies in the exhaustive search's
// bracket and equals it where the search pins the optimum; the lower bound
// is below it and dcp and the single-layout baselines above.
TEST(MilpReferenceTest, AgreesWithTheExhaustiveSearchOnRandomBatches) {
  std::mt19937_64 rng(2026);
  int pinned = 0;
  for (int b = 0; b < 16; ++b) {
    const SmallInstance instance =
        RandomSmallInstance(rng, /*max_sequences=*/7, /*length_doublings=*/8);
    const CostModel& cost_model = instance.cost_model;
    const std::vector<int64_t>& lengths = instance.lengths;
    SCOPED_TRACE(testing::Message()
                 << "batch " << b << ": " << lengths.size() << " sequences on "
                 << cost_model.cluster().num_nodes << "x"
                 << cost_model.cluster().gpus_per_node);
    absl::StatusOr<ExactReference> exact =
        ComputeExactReference(cost_model, {}, lengths);
    absl::StatusOr<MilpReference> milp =
        ComputeMilpReference(cost_model, {}, lengths, TestOptions());
    ASSERT_EQ(exact.ok(), milp.ok())
        << exact.status() << " / " << milp.status();
    if (!milp.ok()) continue;
    ASSERT_TRUE(milp->proven);
    ExpectValidAndPriced(cost_model, lengths, *milp);
    const double optimum = milp->upper_seconds;
    EXPECT_LE(milp->lower_seconds, optimum * (1 + kTolerance));
    EXPECT_GE(milp->lower_seconds, optimum * (1 - 2 * kGap) - 1e-12);
    EXPECT_LE(optimum, exact->upper_seconds * (1 + kTolerance));
    EXPECT_GE(optimum, exact->lower_seconds * (1 - kTolerance));
    if (exact->upper_seconds <= exact->lower_seconds * (1 + 1e-9)) {
      ++pinned;
      EXPECT_NEAR(optimum, exact->upper_seconds,
                  kTolerance * exact->upper_seconds);
    }
    const std::vector<int> sizes = *LegalSpSizes(cost_model, {});
    absl::StatusOr<double> bound =
        StepTimeLowerBound(cost_model, sizes, lengths);
    ASSERT_TRUE(bound.ok()) << bound.status();
    EXPECT_LE(*bound, optimum * (1 + kTolerance));
    absl::StatusOr<Plan> dcp = Planner(cost_model, {}).PlanBatch(lengths);
    ASSERT_TRUE(dcp.ok()) << dcp.status();
    EXPECT_LE(optimum, dcp->predicted_step_seconds * (1 + kTolerance));
    for (int sp : sizes) {
      StaticOptions static_options;
      static_options.sp_size = sp;
      for (auto* baseline : {&PlanBucket, &PlanPacked}) {
        absl::StatusOr<Plan> plan =
            (*baseline)(cost_model, lengths, static_options);
        if (plan.ok()) {
          EXPECT_LE(optimum, plan->predicted_step_seconds * (1 + kTolerance));
        }
      }
    }
  }
  EXPECT_GT(pinned, 8);
}

TEST(MilpReferenceTest, AnUpperBoundCutsLayoutsOffWithoutChangingTheOptimum) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = {32768, 16384, 8192, 8192, 4096,
                                        4096,  2048,  2048, 1024, 512};
  absl::StatusOr<MilpReference> free =
      ComputeMilpReference(cost_model, {}, lengths, TestOptions());
  ASSERT_TRUE(free.ok()) << free.status();
  absl::StatusOr<Plan> dcp = Planner(cost_model, {}).PlanBatch(lengths);
  ASSERT_TRUE(dcp.ok()) << dcp.status();
  MilpReferenceOptions options = TestOptions();
  options.upper_bound_seconds = dcp->predicted_step_seconds;
  absl::StatusOr<MilpReference> cut =
      ComputeMilpReference(cost_model, {}, lengths, options);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_TRUE(free->proven && cut->proven);
  EXPECT_NEAR(cut->upper_seconds, free->upper_seconds,
              kTolerance * free->upper_seconds);
  EXPECT_LE(free->upper_seconds,
            dcp->predicted_step_seconds * (1 + kTolerance));
}

// Larger batches on 16 GPUs (SP 16 beyond llama3-8b's KV heads allowed),
// dcp's step as the cutoff: lower bound <= the MILP's lower end <= its
// plan <= dcp, the plan valid, whether or not every layout closes in time.
TEST(MilpReferenceTest, BracketsLargerBatchesBetweenTheBoundAndDcp) {
  std::mt19937_64 rng(16);
  CostModel cost_model = MakeCostModel("llama3-8b", 2, 8);
  const std::vector<int> sizes = *LegalSpSizes(cost_model, {});
  EXPECT_EQ(sizes.back(), 16);
  for (int b = 0; b < 1; ++b) {
    std::vector<int64_t> lengths;
    for (int s = 0; s < 16; ++s) lengths.push_back(1024 << (rng() % 6));
    SCOPED_TRACE(testing::Message() << "batch " << b);
    absl::StatusOr<Plan> dcp = Planner(cost_model, {}).PlanBatch(lengths);
    ASSERT_TRUE(dcp.ok()) << dcp.status();
    MilpReferenceOptions options = TestOptions();
    options.relative_gap = 1e-4;
    options.layout_time_limit_seconds = 1;
    options.upper_bound_seconds = dcp->predicted_step_seconds;
    absl::StatusOr<MilpReference> milp =
        ComputeMilpReference(cost_model, {}, lengths, options);
    ASSERT_TRUE(milp.ok()) << milp.status();
    absl::StatusOr<double> bound =
        StepTimeLowerBound(cost_model, sizes, lengths);
    ASSERT_TRUE(bound.ok()) << bound.status();
    EXPECT_LE(*bound, milp->upper_seconds * (1 + kTolerance));
    EXPECT_LE(milp->lower_seconds, milp->upper_seconds * (1 + kTolerance));
    EXPECT_LE(milp->upper_seconds,
              dcp->predicted_step_seconds * (1 + kTolerance));
    if (!milp->best_plan.groups.empty()) {
      ExpectValidAndPriced(cost_model, lengths, *milp);
    }
  }
}

TEST(MilpReferenceTest, ClearErrors) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  std::vector<int64_t> many(kMaxMilpReferenceSequences + 1, 1024);
  absl::StatusOr<MilpReference> too_many =
      ComputeMilpReference(cost_model, {}, many);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.status().message().find("at most 64"), std::string::npos)
      << too_many.status();
  MilpReferenceOptions small = TestOptions();
  small.max_columns = 10;
  absl::StatusOr<MilpReference> too_big = ComputeMilpReference(
      cost_model, {}, std::vector<int64_t>{4096, 4096, 4096}, small);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("max_columns"), std::string::npos)
      << too_big.status();
  MilpReferenceOptions no_time = TestOptions();
  no_time.time_limit_seconds = 0;
  absl::StatusOr<MilpReference> late =
      ComputeMilpReference(cost_model, {}, std::vector<int64_t>{4096}, no_time);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace dcp
