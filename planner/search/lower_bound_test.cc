// Unit tests of StepTimeLowerBound against plans built by hand: it must
// never exceed the predicted step time of any legal plan.
#include "planner/search/lower_bound.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/plan.h"
#include "planner/plan/plan_testing.h"
#include "planner/plan/test_cost_model.h"
#include "planner/plan/validate.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

// Predictions of hand-built plans and the bound use the same cost model, so
// only rounding separates a tight bound from the plan.
constexpr double kRelativeTolerance = 1e-9;

// Groups of `sp_size` over the whole world, in rank order, with no work yet.
Plan EmptyHomogeneousPlan(const CostModel& cost_model, int sp_size) {
  Plan plan;
  plan.strategy = "hand-made";
  const int world = cost_model.cluster().NumGpus();
  for (int first = 0; first < world; first += sp_size) {
    GroupPlan group;
    for (int r = first; r < first + sp_size; ++r) group.ranks.push_back(r);
    plan.groups.push_back(std::move(group));
  }
  return plan;
}

// Appends a micro-batch of `indices` to `group`, recomputing only what it
// needs to fit.
void AddMicroBatch(const CostModel& cost_model,
                   const std::vector<int64_t>& lengths,
                   const std::vector<int>& indices, GroupPlan& group) {
  MicroBatchPlan micro_batch;
  micro_batch.sequence_indices = indices;
  std::optional<int> layers = cost_model.MinCheckpointedLayers(
      ShapeOfSequences(lengths, indices, group.sp_size()));
  ASSERT_TRUE(layers.has_value()) << "hand-built micro-batch does not fit";
  micro_batch.checkpointed_layers = *layers;
  group.micro_batches.push_back(std::move(micro_batch));
}

// Each sequence alone in a micro-batch, dealt round-robin over `plan`'s
// groups.
void DealOnePerMicroBatch(const CostModel& cost_model,
                          const std::vector<int64_t>& lengths, Plan& plan) {
  for (int i = 0; i < static_cast<int>(lengths.size()); ++i) {
    AddMicroBatch(cost_model, lengths, {i},
                  plan.groups[i % plan.groups.size()]);
  }
}

// Predicts the plan after checking that it is legal.
double PredictedStepSeconds(const CostModel& cost_model,
                            const std::vector<int64_t>& lengths, Plan plan) {
  absl::Status valid = ValidatePlan(cost_model, lengths, plan);
  EXPECT_TRUE(valid.ok()) << valid;
  PredictPlan(cost_model, lengths, plan);
  return plan.predicted_step_seconds;
}

double Bound(const CostModel& cost_model, const std::vector<int64_t>& lengths) {
  absl::StatusOr<std::vector<int>> sizes = LegalSpSizes(cost_model, {});
  EXPECT_TRUE(sizes.ok()) << sizes.status();
  absl::StatusOr<double> bound =
      StepTimeLowerBound(cost_model, *sizes, lengths);
  EXPECT_TRUE(bound.ok()) << bound.status();
  return bound.ok() ? *bound : std::numeric_limits<double>::infinity();
}

// The bound of `lengths` is at most `plan`'s predicted step, up to rounding.
void ExpectBoundAtMost(const CostModel& cost_model,
                       const std::vector<int64_t>& lengths, const Plan& plan) {
  EXPECT_LE(Bound(cost_model, lengths),
            PredictedStepSeconds(cost_model, lengths, plan) *
                (1 + kRelativeTolerance));
}

// Deterministic lengths in [low, high].
std::vector<int64_t> Lengths(int count, int64_t low, int64_t high) {
  return LcgLengths(count, low, high, /*seed=*/99);
}

// A few batches llama3-8b on 4x8 runs at SP 1 (every length fits one GPU).
std::vector<std::vector<int64_t>> BatchesThatFitOneGpu() {
  return {
      {4096},
      Lengths(/*count=*/32, /*low=*/2000, /*high=*/2000),
      Lengths(/*count=*/64, /*low=*/500, /*high=*/8000),
      Lengths(/*count=*/200, /*low=*/1000, /*high=*/2000),
      [] {
        std::vector<int64_t> skewed =
            Lengths(/*count=*/100, /*low=*/100, /*high=*/4000);
        skewed.push_back(50000);
        return skewed;
      }(),
  };
}

TEST(StepTimeLowerBoundTest, AtMostEverySequenceAloneAtSpOneRoundRobin) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  for (const std::vector<int64_t>& lengths : BatchesThatFitOneGpu()) {
    SCOPED_TRACE(testing::Message() << lengths.size() << " sequences");
    Plan plan = EmptyHomogeneousPlan(cost_model, /*sp_size=*/1);
    DealOnePerMicroBatch(cost_model, lengths, plan);
    EXPECT_GT(Bound(cost_model, lengths), 0);
    ExpectBoundAtMost(cost_model, lengths, plan);
  }
}

TEST(StepTimeLowerBoundTest, AtMostEverythingInOneGroup) {
  // One SP-8 group runs the whole batch, one sequence per micro-batch; the
  // other 24 GPUs idle. A poor plan, but a legal one.
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  for (const std::vector<int64_t>& lengths : BatchesThatFitOneGpu()) {
    SCOPED_TRACE(testing::Message() << lengths.size() << " sequences");
    Plan plan = EmptyHomogeneousPlan(cost_model, /*sp_size=*/8);
    for (int i = 0; i < static_cast<int>(lengths.size()); ++i) {
      AddMicroBatch(cost_model, lengths, {i}, plan.groups[0]);
    }
    ExpectBoundAtMost(cost_model, lengths, plan);
  }
}

TEST(StepTimeLowerBoundTest, AtMostAPackedHeterogeneousPlan) {
  // 4x8: the long sequence alone on node 0 at SP 8, the rest packed into one
  // micro-batch per SP-1 group on the other 24 GPUs.
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  std::vector<int64_t> lengths =
      Lengths(/*count=*/120, /*low=*/1000, /*high=*/6000);
  lengths.push_back(150000);
  Plan plan;
  plan.strategy = "hand-made";
  GroupPlan long_group;
  for (int r = 0; r < 8; ++r) long_group.ranks.push_back(r);
  AddMicroBatch(cost_model, lengths, {static_cast<int>(lengths.size()) - 1},
                long_group);
  plan.groups.push_back(std::move(long_group));
  std::vector<std::vector<int>> dealt(24);
  for (int i = 0; i + 1 < static_cast<int>(lengths.size()); ++i) {
    dealt[i % 24].push_back(i);
  }
  for (int g = 0; g < 24; ++g) {
    GroupPlan group;
    group.ranks = {8 + g};
    AddMicroBatch(cost_model, lengths, dealt[g], group);
    plan.groups.push_back(std::move(group));
  }
  ExpectBoundAtMost(cost_model, lengths, plan);
}

TEST(StepTimeLowerBoundTest, CountsTheFixedCostOfTheMicroBatchesTheTokensNeed) {
  // 8 GPUs at SP 1, 1,600 short sequences dealt evenly: every plan runs them
  // in micro-batches of at most the no-recompute capacity (or recomputes),
  // each paying the fixed per-micro-batch costs (about 2% of a full one).
  // Packed full, this plan is about the best there is; a bound without those
  // costs was 2% below it.
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths =
      Lengths(/*count=*/1600, /*low=*/1000, /*high=*/1000);
  const int64_t capacity = cost_model.MaxTokensPerRank(0, 1);
  Plan plan = EmptyHomogeneousPlan(cost_model, /*sp_size=*/1);
  for (int g = 0; g < 8; ++g) {
    std::vector<int> bin;
    int64_t tokens = 0;
    for (int i = g; i < static_cast<int>(lengths.size()); i += 8) {
      if (tokens + lengths[i] > capacity) {
        AddMicroBatch(cost_model, lengths, bin, plan.groups[g]);
        bin.clear();
        tokens = 0;
      }
      bin.push_back(i);
      tokens += lengths[i];
    }
    AddMicroBatch(cost_model, lengths, bin, plan.groups[g]);
  }
  ASSERT_GT(plan.groups[0].micro_batches.size(), 10u);
  const double step = PredictedStepSeconds(cost_model, lengths, plan);
  const double bound = Bound(cost_model, lengths);
  EXPECT_LE(bound, step * (1 + kRelativeTolerance));
  EXPECT_GE(bound, 0.99 * step);
}

TEST(StepTimeLowerBoundTest, AtMostPlansWithWholeNodeGroups) {
  // video-dit-1b on 4x8 may use SP 16 over two nodes.
  const CostModel cost_model = MakeCostModel("video-dit-1b", 4, 8);
  std::vector<int64_t> lengths =
      Lengths(/*count=*/40, /*low=*/5000, /*high=*/60000);
  lengths.push_back(1'500'000);
  lengths.push_back(900'000);
  for (int sp_size : {2, 4, 8, 16}) {
    SCOPED_TRACE(testing::Message() << "SP " << sp_size);
    Plan plan = EmptyHomogeneousPlan(cost_model, sp_size);
    DealOnePerMicroBatch(cost_model, lengths, plan);
    ExpectBoundAtMost(cost_model, lengths, plan);
  }
}

TEST(StepTimeLowerBoundTest, AtMostPlansWhoseComputeAtSpTwoAndAboveIsScaled) {
  // The online refit may make the compute at SP >= 2 cheaper than at SP 1:
  // the bound must follow it. 512 equal sequences packed four to a
  // micro-batch on SP-2 groups is close to the bound.
  const CostModel defaults = MakeCostModel("llama3-8b", 4, 8);
  CostParams params = defaults.params();
  params.compute.sp_compute_scale = 0.5;
  const CostModel cost_model =
      CostModel::Create(defaults.model(), defaults.cluster(), params).value();
  const std::vector<int64_t> lengths =
      Lengths(/*count=*/512, /*low=*/2000, /*high=*/2000);
  Plan plan = EmptyHomogeneousPlan(cost_model, /*sp_size=*/2);
  for (int i = 0; i < static_cast<int>(lengths.size()); i += 4) {
    AddMicroBatch(cost_model, lengths, {i, i + 1, i + 2, i + 3},
                  plan.groups[(i / 4) % plan.groups.size()]);
  }
  ExpectBoundAtMost(cost_model, lengths, plan);
}

TEST(StepTimeLowerBoundTest, NeverFallsWhenASequenceIsAdded) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  const std::vector<int64_t> all =
      Lengths(/*count=*/80, /*low=*/100, /*high=*/30000);
  std::vector<int64_t> lengths;
  double previous = 0;
  for (int64_t length : all) {
    lengths.push_back(length);
    const double bound = Bound(cost_model, lengths);
    EXPECT_GE(bound, previous) << "after adding " << length << " tokens";
    previous = bound;
  }
}

TEST(StepTimeLowerBoundTest, GrowsWhenTheTotalWorkDominates) {
  // 400 sequences of 8,000 tokens are far more work than any one of them,
  // so one more sequence raises the bound.
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  std::vector<int64_t> lengths(400, 8000);
  const double before = Bound(cost_model, lengths);
  lengths.push_back(8000);
  const double with_401 = Bound(cost_model, lengths);
  EXPECT_GT(with_401, before);
  // Even a one-token sequence adds work.
  lengths.push_back(1);
  EXPECT_GT(Bound(cost_model, lengths), with_401);
}

TEST(StepTimeLowerBoundTest, GrowsWhenALongerSequenceIsAdded) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  std::vector<int64_t> lengths = {2000, 3000, 100000};
  const double before = Bound(cost_model, lengths);
  lengths.push_back(200000);
  EXPECT_GT(Bound(cost_model, lengths), before);
}

TEST(StepTimeLowerBoundTest, OneLongSequenceIsAtLeastItsBestMicroBatch) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  // Up to SP 32: beyond 8 the KV heads are copied.
  const std::vector<int> sizes = *LegalSpSizes(cost_model, {});
  for (int64_t length :
       {int64_t{30000}, int64_t{100000}, int64_t{200000}, int64_t{400000}}) {
    SCOPED_TRACE(testing::Message() << length << " tokens");
    const std::vector<int64_t> lengths = {length};
    // The fastest micro-batch holding only it, on any size it fits.
    double best = std::numeric_limits<double>::infinity();
    int best_sp = 0;
    for (int sp : sizes) {
      MicroBatchShape shape = ShapeOf(lengths, sp);
      std::optional<int> layers = cost_model.MinCheckpointedLayers(shape);
      if (!layers) continue;
      const double seconds =
          cost_model.MicroBatch(shape, *layers).total_seconds;
      if (seconds < best) {
        best = seconds;
        best_sp = sp;
      }
    }
    ASSERT_GT(best_sp, 0);
    const double bound = Bound(cost_model, lengths);
    EXPECT_GE(bound, best * (1 - kRelativeTolerance));
    // ...and at most that plan: it alone on one group of its best size.
    Plan plan = EmptyHomogeneousPlan(cost_model, best_sp);
    AddMicroBatch(cost_model, lengths, {0}, plan.groups[0]);
    const double step = PredictedStepSeconds(cost_model, lengths, plan);
    EXPECT_LE(bound, step * (1 + kRelativeTolerance));
    EXPECT_LE(step, best + cost_model.GradientAllReduceSeconds());
  }
}

TEST(StepTimeLowerBoundTest, TightWhenOneSequenceDominates) {
  // At the sizes that need no KV copies (1-8), 100,000 tokens need SP 8 to
  // run without much recompute; its micro-batch hides the whole gradient
  // all-reduce, so that plan is optimal. (At SP 32 it runs faster but no
  // longer hides the all-reduce.)
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  const std::vector<int64_t> lengths = {100000};
  Plan plan = EmptyHomogeneousPlan(cost_model, /*sp_size=*/8);
  AddMicroBatch(cost_model, lengths, {0}, plan.groups[0]);
  const double step = PredictedStepSeconds(cost_model, lengths, plan);
  absl::StatusOr<double> bound =
      StepTimeLowerBound(cost_model, std::vector<int>{1, 2, 4, 8}, lengths);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_NEAR(*bound, step, step * 1e-9);
}

// Ten video sequences of 183,600 tokens on 128 GPUs: each takes about
// 1.8 s on 16 GPUs or 3.3 s on 8, but 128 GPUs hold only eight groups of
// 16, and no GPU can run two within less than 3.6 s. So no plan is faster
// than one group of 8 per sequence, however little the GPU-seconds
// average: the packing bound proves that plan optimal, where the first two
// terms stay well below it.
TEST(StepTimeLowerBoundTest, PackingBoundProvesTenLongVideosNeedGroupsOfEight) {
  const CostModel cost_model = MakeCostModel("video-dit-1b", 16, 8);
  const std::vector<int64_t> lengths(10, 183600);
  Plan plan = EmptyHomogeneousPlan(cost_model, /*sp_size=*/8);
  for (int i = 0; i < 10; ++i) {
    AddMicroBatch(cost_model, lengths, {i}, plan.groups[i]);
  }
  const double predicted = PredictedStepSeconds(cost_model, lengths, plan);
  const double bound = Bound(cost_model, lengths);
  EXPECT_LE(bound, predicted * (1 + kRelativeTolerance));
  EXPECT_GE(bound, predicted * (1 - kRelativeTolerance));

  absl::StatusOr<SequenceBounds> bounds = SequenceBounds::Create(
      cost_model, LegalSpSizes(cost_model, {}).value(), lengths);
  ASSERT_TRUE(bounds.ok()) << bounds.status();
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  // The first two terms alone: well below.
  EXPECT_LT(bounds->SlowestGroupSeconds(all),
            0.8 * bounds->SlowestGroupSeconds());
  // Eight of them fit on groups of 16 side by side: the bound drops to
  // one such group's time.
  const std::vector<int64_t> eight(8, 183600);
  Plan of_eight = EmptyHomogeneousPlan(cost_model, /*sp_size=*/16);
  for (int i = 0; i < 8; ++i) {
    AddMicroBatch(cost_model, eight, {i}, of_eight.groups[i]);
  }
  const double eight_predicted =
      PredictedStepSeconds(cost_model, eight, of_eight);
  EXPECT_LT(eight_predicted, 0.6 * predicted);
  EXPECT_LE(Bound(cost_model, eight),
            eight_predicted * (1 + kRelativeTolerance));
}

// StepTimeLowerBound over `sp_sizes` fails with `code` and a message naming
// `part`; returns the message.
std::string ExpectBoundFails(const CostModel& cost_model,
                             const std::vector<int>& sp_sizes,
                             const std::vector<int64_t>& lengths,
                             absl::StatusCode code, const std::string& part) {
  const absl::Status status =
      StepTimeLowerBound(cost_model, sp_sizes, lengths).status();
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(status.message(), HasSubstr(part));
  return std::string(status.message());
}

TEST(StepTimeLowerBoundTest, RejectsAnEmptyBatch) {
  ExpectBoundFails(MakeCostModel("llama3-8b", 4, 8), {1, 2, 4, 8}, {},
                   absl::StatusCode::kInvalidArgument, "empty");
}

TEST(StepTimeLowerBoundTest, RejectsANonPositiveLengthNamingItsIndex) {
  ExpectBoundFails(MakeCostModel("llama3-8b", 4, 8), {1, 2, 4, 8},
                   {100, 200, -3}, absl::StatusCode::kInvalidArgument,
                   "sequence 2");
}

TEST(StepTimeLowerBoundTest, SequenceThatFitsNowhereIsResourceExhausted) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  EXPECT_THAT(
      ExpectBoundFails(cost_model, {1, 2, 4, 8}, {1000, 10'000'000, 1000},
                       absl::StatusCode::kResourceExhausted, "sequence 1"),
      HasSubstr("10000000 tokens"));
  // Restricting the sizes can also leave it nowhere to fit.
  ExpectBoundFails(cost_model, {1}, {100000},
                   absl::StatusCode::kResourceExhausted, "sequence 0");
}

TEST(StepTimeLowerBoundTest, ModelStateThatDoesNotFitIsResourceExhausted) {
  ExpectBoundFails(MakeCostModel("llama3-70b", 4, 8), {1, 2, 4, 8}, {1000},
                   absl::StatusCode::kResourceExhausted, "llama3-70b");
}

}  // namespace
}  // namespace dcp
