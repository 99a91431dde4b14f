// Focused unit tests of the DCP planner on hand-picked batches: what it
// chooses on skewed batches (SP sizes, accumulation, recompute), what the
// ablation options change, and its errors. Randomized checks live in
// planner_property_test.cc.
#include "planner/search/planner.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
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
#include "planner/search/lower_bound.h"
#include "planner/strategies/baselines.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kRelativeTolerance = 1e-9;
constexpr double kGiB = 1024.0 * 1024 * 1024;

// `num_short` sequences of 1,000-2,000 tokens followed by the given long
// ones: the skewed batches of long-context training.
std::vector<int64_t> SkewedBatch(int num_short,
                                 const std::vector<int64_t>& long_lengths) {
  std::vector<int64_t> lengths;
  for (int i = 0; i < num_short; ++i) lengths.push_back(1000 + (i * 37) % 1001);
  lengths.insert(lengths.end(), long_lengths.begin(), long_lengths.end());
  return lengths;
}

absl::StatusOr<Plan> PlanWith(const CostModel& cost_model,
                              const std::vector<int64_t>& lengths,
                              PlannerOptions options = {}) {
  return Planner(cost_model, std::move(options)).PlanBatch(lengths);
}

std::set<int> SpSizes(const Plan& plan) {
  std::set<int> sizes;
  for (const GroupPlan& group : plan.groups) sizes.insert(group.sp_size());
  return sizes;
}

std::set<int> CheckpointSettings(const Plan& plan) {
  std::set<int> settings;
  for (const GroupPlan& group : plan.groups) {
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      settings.insert(micro_batch.checkpointed_layers);
    }
  }
  return settings;
}

// The groups' micro-batch counts (their gradient accumulations).
std::set<size_t> AccumulationCounts(const Plan& plan) {
  std::set<size_t> counts;
  for (const GroupPlan& group : plan.groups) {
    counts.insert(group.micro_batches.size());
  }
  return counts;
}

size_t SequencesOf(const GroupPlan& group) {
  size_t count = 0;
  for (const MicroBatchPlan& micro_batch : group.micro_batches) {
    count += micro_batch.sequence_indices.size();
  }
  return count;
}

// The group running sequence `index`, or nullptr.
const GroupPlan* GroupOf(const Plan& plan, int index) {
  for (const GroupPlan& group : plan.groups) {
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      if (std::count(micro_batch.sequence_indices.begin(),
                     micro_batch.sequence_indices.end(), index) > 0) {
        return &group;
      }
    }
  }
  return nullptr;
}

const GroupPlan& SlowestGroup(const Plan& plan) {
  return *std::max_element(plan.groups.begin(), plan.groups.end(),
                           [](const GroupPlan& a, const GroupPlan& b) {
                             return a.predicted_seconds < b.predicted_seconds;
                           });
}

void ExpectLegalAndBounded(const CostModel& cost_model,
                           const std::vector<int64_t>& lengths,
                           const Plan& plan) {
  absl::Status valid = ValidatePlan(cost_model, lengths, plan);
  EXPECT_TRUE(valid.ok()) << valid;
  EXPECT_GT(plan.lower_bound_seconds, 0);
  EXPECT_GE(plan.predicted_step_seconds,
            plan.lower_bound_seconds * (1 - kRelativeTolerance));
}

// The SP sizes that split llama3-8b's 8 KV heads without copies: the tests
// below tell their story (SP 8 is the long sequences' fastest size) there.
const std::vector<int> kWithinKvHeads = {1, 2, 4, 8};

// 200 short sequences and two of 100,000+ tokens (SP >= 2 each) on
// llama3-8b, 4x8, planned at kWithinKvHeads unless a test says otherwise.
class SkewedBatchTest : public ::testing::Test {
 protected:
  SkewedBatchTest()
      : cost_model_(MakeCostModel("llama3-8b", 4, 8)),
        lengths_(SkewedBatch(/*num_short=*/200, {100000, 105000})) {}

  absl::StatusOr<Plan> PlanSkewed(PlannerOptions options = {}) const {
    if (options.sp_sizes.empty()) options.sp_sizes = kWithinKvHeads;
    return PlanWith(cost_model_, lengths_, std::move(options));
  }

  const CostModel cost_model_;
  const std::vector<int64_t> lengths_;
};

TEST_F(SkewedBatchTest, PlanIsLegalAndNotBelowTheLowerBound) {
  absl::StatusOr<Plan> plan = PlanSkewed();
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->strategy, "dcp");
  ExpectLegalAndBounded(cost_model_, lengths_, *plan);
  // The bound in the plan is the independent one.
  absl::StatusOr<double> bound =
      StepTimeLowerBound(cost_model_, kWithinKvHeads, lengths_);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_DOUBLE_EQ(plan->lower_bound_seconds, *bound);
  // And it beats static training.
  for (auto* plan_static : {&PlanBucket, &PlanPacked}) {
    absl::StatusOr<Plan> baseline =
        (*plan_static)(cost_model_, lengths_, StaticOptions{});
    ASSERT_TRUE(baseline.ok()) << baseline.status();
    EXPECT_LT(plan->predicted_step_seconds, baseline->predicted_step_seconds)
        << baseline->strategy;
  }
}

// Why one SP size here: the 105,000-token sequence alone at SP 8 (its
// fastest size) takes longer than all 200 short sequences spread over the
// other GPUs, so the lower bound is that one micro-batch, and any layout
// giving both long sequences an SP-8 group of their own reaches it. The
// planner's homogeneous SP-8 plan does: it is optimal under the model, so
// no mix of sizes could be faster.
TEST_F(SkewedBatchTest, HomogeneousBecauseTheLongestSequenceBoundsTheStep) {
  absl::StatusOr<Plan> plan = PlanSkewed();
  ASSERT_TRUE(plan.ok()) << plan.status();
  // The step is the bound (computed independently): nothing can do better.
  EXPECT_NEAR(plan->predicted_step_seconds, plan->lower_bound_seconds,
              plan->lower_bound_seconds * kRelativeTolerance);
  // ...and that bound is the longest sequence's best micro-batch alone,
  // then the optimizer step.
  double best_alone = 1e300;
  for (int sp : {1, 2, 4, 8}) {
    MicroBatchShape shape = ShapeOf({lengths_.back()}, sp);
    std::optional<int> layers = cost_model_.MinCheckpointedLayers(shape);
    if (!layers) continue;
    best_alone = std::min(best_alone,
                          cost_model_.MicroBatch(shape, *layers).total_seconds);
  }
  best_alone += cost_model_.OptimizerStepSeconds();
  EXPECT_NEAR(plan->lower_bound_seconds, best_alone, best_alone * 1e-9);
  EXPECT_THAT(SpSizes(*plan), ElementsAre(8));
  // The two long sequences run on different SP-8 groups (together they
  // would take longer than the bound).
  const int n = static_cast<int>(lengths_.size());
  const GroupPlan* first_long = GroupOf(*plan, n - 2);
  const GroupPlan* second_long = GroupOf(*plan, n - 1);
  ASSERT_NE(first_long, nullptr);
  ASSERT_NE(second_long, nullptr);
  EXPECT_NE(first_long, second_long);
}

// With every legal size, SP 16 (two copies of each KV head, over two nodes)
// runs the long sequences faster than SP 8 despite the larger all-to-alls:
// the bound and the plan both drop, and the plan stays valid.
TEST_F(SkewedBatchTest, SpBeyondTheKvHeadsLowersTheBoundAndTheStep) {
  absl::StatusOr<Plan> within = PlanSkewed();
  ASSERT_TRUE(within.ok()) << within.status();
  PlannerOptions all;
  all.sp_sizes = *LegalSpSizes(cost_model_, {});
  ASSERT_THAT(all.sp_sizes, ElementsAre(1, 2, 4, 8, 16, 32));
  absl::StatusOr<Plan> beyond = PlanSkewed(all);
  ASSERT_TRUE(beyond.ok()) << beyond.status();
  ExpectLegalAndBounded(cost_model_, lengths_, *beyond);
  EXPECT_LT(beyond->lower_bound_seconds, within->lower_bound_seconds);
  EXPECT_LT(beyond->predicted_step_seconds, within->predicted_step_seconds);
  const int n = static_cast<int>(lengths_.size());
  ASSERT_NE(GroupOf(*beyond, n - 1), nullptr);
  EXPECT_GT(GroupOf(*beyond, n - 1)->sp_size(), 8);
}

TEST_F(SkewedBatchTest, LongSequencesRunOnGroupsTheyFit) {
  absl::StatusOr<Plan> plan = PlanSkewed();
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<int> sizes = *LegalSpSizes(cost_model_, {});
  for (int index = 0; index < static_cast<int>(lengths_.size()); ++index) {
    absl::StatusOr<int> least =
        MinFeasibleSpSize(cost_model_, sizes, index, lengths_[index]);
    ASSERT_TRUE(least.ok()) << least.status();
    const GroupPlan* group = GroupOf(*plan, index);
    ASSERT_NE(group, nullptr) << "sequence " << index << " unplanned";
    EXPECT_GE(group->sp_size(), *least) << "sequence " << index;
  }
  // 105K tokens need SP 4: at SP 2 they need 107.7 GiB per GPU with full
  // recompute, 3.0 GB of it the 1 + 4 NCCL communicators the H200 defaults
  // count, over the 105.1 GiB budget.
  EXPECT_EQ(*MinFeasibleSpSize(cost_model_, sizes, 201, lengths_[201]), 4);
}

TEST_F(SkewedBatchTest, GroupsRunDifferentNumbersOfMicroBatches) {
  absl::StatusOr<Plan> plan = PlanSkewed();
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GT(AccumulationCounts(*plan).size(), 1u)
      << "every group runs the same accumulation";
}

TEST_F(SkewedBatchTest, PyramidRecomputeDiffersBetweenShortAndLong) {
  absl::StatusOr<Plan> plan = PlanSkewed();
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GT(CheckpointSettings(*plan).size(), 1u);
  // Every micro-batch recomputes exactly what it needs, or (to hide the
  // all-reduce) more; the short ones need nothing.
  for (const GroupPlan& group : plan->groups) {
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      EXPECT_GE(micro_batch.checkpointed_layers,
                *cost_model_.MinCheckpointedLayers(ShapeOfSequences(
                    lengths_, micro_batch.sequence_indices, group.sp_size())));
    }
  }
  EXPECT_TRUE(CheckpointSettings(*plan).count(0) > 0)
      << "the short sequences recompute nothing";
}

TEST_F(SkewedBatchTest, WithoutPyramidOneRecomputeSetting) {
  PlannerOptions options;
  options.pyramid_recompute = false;
  absl::StatusOr<Plan> plan = PlanSkewed(options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLegalAndBounded(cost_model_, lengths_, *plan);
  ASSERT_EQ(CheckpointSettings(*plan).size(), 1u);
  // The one setting is what the hungriest micro-batch needs: more than 0.
  EXPECT_GT(*CheckpointSettings(*plan).begin(), 0);
}

// Without variable accumulation every group runs the same count C, except a
// group with fewer than C sequences runs one micro-batch per sequence. Here
// C = 2 (the short groups need two micro-batches to fit) while each long
// sequence's group has one sequence.
TEST(PlannerTest, FixedAccumulationGivesEveryGroupTheCommonCount) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  const std::vector<int64_t> lengths =
      SkewedBatch(/*num_short=*/600, {150000, 155000});
  PlannerOptions options;
  options.sp_sizes = kWithinKvHeads;
  options.variable_accumulation = false;
  absl::StatusOr<Plan> plan = PlanWith(cost_model, lengths, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLegalAndBounded(cost_model, lengths, *plan);
  const size_t common = *AccumulationCounts(*plan).rbegin();
  EXPECT_GE(common, 2u);
  bool some_group_has_fewer_sequences = false;
  for (const GroupPlan& group : plan->groups) {
    const size_t sequences = SequencesOf(group);
    EXPECT_EQ(group.micro_batches.size(), std::min(common, sequences));
    if (sequences < common) some_group_has_fewer_sequences = true;
  }
  EXPECT_TRUE(some_group_has_fewer_sequences);

  // With variable accumulation the same batch uses different counts.
  PlannerOptions variable_options;
  variable_options.sp_sizes = kWithinKvHeads;
  absl::StatusOr<Plan> variable =
      PlanWith(cost_model, lengths, variable_options);
  ASSERT_TRUE(variable.ok()) << variable.status();
  EXPECT_GT(AccumulationCounts(*variable).size(), 1u);
}

TEST_F(SkewedBatchTest, WithoutVariableAccumulationOnTheSkewedBatch) {
  PlannerOptions options;
  options.variable_accumulation = false;
  absl::StatusOr<Plan> plan = PlanSkewed(options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLegalAndBounded(cost_model_, lengths_, *plan);
  const size_t common = *AccumulationCounts(*plan).rbegin();
  for (const GroupPlan& group : plan->groups) {
    EXPECT_EQ(group.micro_batches.size(), std::min(common, SequencesOf(group)));
  }
}

TEST_F(SkewedBatchTest, SameInputSamePlan) {
  const Planner planner(cost_model_, PlannerOptions{});
  absl::StatusOr<Plan> first = planner.PlanBatch(lengths_);
  absl::StatusOr<Plan> second = planner.PlanBatch(lengths_);
  absl::StatusOr<Plan> other_planner = PlanWith(cost_model_, lengths_);
  ASSERT_TRUE(first.ok() && second.ok() && other_planner.ok());
  ExpectSamePlan(*second, *first);
  ExpectSamePlan(*other_planner, *first);
}

// The search reports each stage it passes through PlannerOptions::progress,
// and reporting changes nothing in the plan.
TEST_F(SkewedBatchTest, ReportsProgressAndPlansTheSameWithIt) {
  std::vector<std::string> messages;
  PlannerOptions options;
  options.progress = [&](const PlanningProgress& progress) {
    messages.push_back(progress.message);
  };
  absl::StatusOr<Plan> reported = PlanSkewed(options);
  absl::StatusOr<Plan> quiet = PlanSkewed();
  ASSERT_TRUE(reported.ok() && quiet.ok());
  ExpectSamePlan(*reported, *quiet);
  ASSERT_GE(messages.size(), 4u);
  // 202 sequences; the two long ones and 200 short of 1,000-2,000 tokens.
  EXPECT_THAT(messages[0], HasSubstr("priced 202 sequences ("));
  EXPECT_THAT(messages[1], HasSubstr("layouts of SP groups by estimate"));
  EXPECT_THAT(messages[2], HasSubstr("layouts exactly; refining the best"));
  EXPECT_THAT(messages[3], HasSubstr("searched: predicted step"));
}

// Past 2^16 sequences the greedy assignment places runs of near-identical
// sequences together (a near-linear search); the plan stays legal, close to
// the lower bound and deterministic, and sequences of one length are priced
// once.
TEST(PlannerTest, LargeBatchPlannedOverLengthClassesStaysLegalAndClose) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 2, 8);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 70000; ++i) lengths.push_back(200 + (i * 7919) % 1800);
  lengths[123] = 60000;
  lengths[45678] = 90000;
  std::vector<std::string> messages;
  PlannerOptions options;
  options.progress = [&](const PlanningProgress& progress) {
    messages.push_back(progress.message);
  };
  const Planner planner(cost_model, options);
  absl::StatusOr<Plan> plan = planner.PlanBatch(lengths);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLegalAndBounded(cost_model, lengths, *plan);
  EXPECT_LT(plan->GapToLowerBound(), 0.05);
  ASSERT_FALSE(messages.empty());
  EXPECT_THAT(messages[0],
              HasSubstr("priced 70000 sequences (1802 distinct lengths)"));
  absl::StatusOr<Plan> again = planner.PlanBatch(lengths);
  ASSERT_TRUE(again.ok());
  ExpectSamePlan(*again, *plan);
}

// With ten times the short sequences, the short work outweighs the long
// sequences: the planner mixes SP 1 groups (no all-to-all) for the short
// ones with an SP 8 group for the long ones, and that beats every
// homogeneous layout the model allows.
TEST(PlannerTest, HeterogeneousWhenShortWorkDominates) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  const std::vector<int64_t> lengths =
      SkewedBatch(/*num_short=*/2000, {100000, 105000});
  absl::StatusOr<Plan> plan = PlanWith(cost_model, lengths);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLegalAndBounded(cost_model, lengths, *plan);
  EXPECT_GT(SpSizes(*plan).size(), 1u) << "one SP size for the whole step";
  const int n = static_cast<int>(lengths.size());
  for (int index : {n - 2, n - 1}) {
    ASSERT_NE(GroupOf(*plan, index), nullptr);
    EXPECT_GE(GroupOf(*plan, index)->sp_size(), 2);
  }
  // Homogeneous layouts: the 105K sequence needs SP >= 4 (at SP 2, 107.7
  // GiB per GPU with the NCCL communicators counted; the budget is 105.1).
  PlannerOptions sp2;
  sp2.sp_sizes = {2};
  EXPECT_EQ(PlanWith(cost_model, lengths, sp2).status().code(),
            absl::StatusCode::kResourceExhausted);
  for (int sp : {4, 8}) {
    PlannerOptions only;
    only.sp_sizes = {sp};
    absl::StatusOr<Plan> homogeneous = PlanWith(cost_model, lengths, only);
    ASSERT_TRUE(homogeneous.ok()) << homogeneous.status();
    EXPECT_THAT(SpSizes(*homogeneous), ElementsAre(sp));
    EXPECT_LT(plan->predicted_step_seconds, homogeneous->predicted_step_seconds)
        << "SP " << sp << " alone is at least as fast";
  }
}

// The full planner should never be predicted slower than one of its own
// ablations: an ablation's plan is legal for the full planner too (the code
// already applies that rule to the static baselines). On this batch the
// pyramid-off plan is faster: with pyramid recompute, the slowest group is
// one of the SP-1 groups, whose short last micro-batch hides little of the
// gradient all-reduce; with one uniform setting, the SP-8 group with a long
// sequence last becomes the slowest and hides all of it.
TEST(PlannerTest, NoSlowerThanItsAblations) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  for (int num_short : {200, 600, 2000}) {
    const std::vector<int64_t> lengths =
        SkewedBatch(num_short, {100000, 105000});
    absl::StatusOr<Plan> full = PlanWith(cost_model, lengths);
    ASSERT_TRUE(full.ok()) << full.status();
    for (int ablation : {0, 1}) {
      PlannerOptions options;
      options.variable_accumulation = ablation != 0;
      options.pyramid_recompute = ablation != 1;
      absl::StatusOr<Plan> restricted = PlanWith(cost_model, lengths, options);
      ASSERT_TRUE(restricted.ok()) << restricted.status();
      ASSERT_TRUE(ValidatePlan(cost_model, lengths, *restricted).ok());
      EXPECT_LE(full->predicted_step_seconds,
                restricted->predicted_step_seconds * (1 + kRelativeTolerance))
          << num_short << " short sequences, "
          << (ablation == 0 ? "fixed accumulation" : "uniform recompute")
          << " is faster: full " << full->predicted_step_seconds
          << " s (slowest group " << full->slowest_group_seconds << " s at SP "
          << SlowestGroup(*full).sp_size() << ", exposed all-reduce "
          << full->exposed_allreduce_seconds << " s) vs "
          << restricted->predicted_step_seconds << " s (slowest group "
          << restricted->slowest_group_seconds << " s at SP "
          << SlowestGroup(*restricted).sp_size() << ", exposed all-reduce "
          << restricted->exposed_allreduce_seconds << " s)";
    }
  }
}

TEST(PlannerTest, RequestedSpSizesRestrictTheGroups) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  const std::vector<int64_t> lengths = SkewedBatch(/*num_short=*/100, {60000});
  PlannerOptions options;
  options.sp_sizes = {4, 2};
  options.strategy_name = "dcp-sp2-4";
  absl::StatusOr<Plan> plan = PlanWith(cost_model, lengths, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->strategy, "dcp-sp2-4");
  for (int sp : SpSizes(*plan)) {
    EXPECT_TRUE(sp == 2 || sp == 4) << "SP " << sp;
  }
  ExpectLegalAndBounded(cost_model, lengths, *plan);
}

TEST(PlannerTest, OneSequence) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  const std::vector<int64_t> lengths = {70000};
  absl::StatusOr<Plan> plan = PlanWith(cost_model, lengths);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLegalAndBounded(cost_model, lengths, *plan);
  EXPECT_EQ(MicroBatchCount(*plan), 1);
  const GroupPlan* group = GroupOf(*plan, 0);
  ASSERT_NE(group, nullptr);
  EXPECT_GE(group->sp_size(), 2);  // 70,000 tokens do not fit one GPU
}

TEST(PlannerTest, OneGpuWorld) {
  const CostModel cost_model = MakeCostModel("tiny", 1, 1);
  const std::vector<int64_t> lengths = {100, 200, 3000, 7};
  absl::StatusOr<Plan> plan = PlanWith(cost_model, lengths);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLegalAndBounded(cost_model, lengths, *plan);
  ASSERT_EQ(plan->groups.size(), 1u);
  EXPECT_THAT(plan->groups[0].ranks, ElementsAre(0));
  EXPECT_EQ(SequencesOf(plan->groups[0]), 4u);
  // No data parallelism: nothing to all-reduce.
  EXPECT_EQ(plan->exposed_allreduce_seconds, 0);
}

TEST(PlannerTest, RejectsAnEmptyBatch) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  absl::StatusOr<Plan> plan = PlanWith(cost_model, {});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("empty"));
}

TEST(PlannerTest, RejectsAZeroLengthNamingItsIndex) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  absl::StatusOr<Plan> plan = PlanWith(cost_model, {1000, 2000, 3000, 0, 5});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("sequence 3"));
}

TEST(PlannerTest, SequenceThatFitsNowhereNamesItAndTheBudget) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  absl::StatusOr<Plan> plan = PlanWith(cost_model, {1000, 2000, 10'000'000});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plan.status().message(), HasSubstr("sequence 2"));
  EXPECT_THAT(plan.status().message(), HasSubstr("10000000 tokens"));
  EXPECT_THAT(
      plan.status().message(),
      HasSubstr(absl::StrFormat("budget is %.1f GiB",
                                cost_model.MemoryBudgetBytes() / kGiB)));
}

TEST(PlannerTest, SequenceTooLongForTheRequestedSizes) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  PlannerOptions options;
  options.sp_sizes = {1, 2};
  absl::StatusOr<Plan> plan = PlanWith(cost_model, {1000, 150000}, options);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plan.status().message(), HasSubstr("sequence 1"));
  EXPECT_THAT(plan.status().message(), HasSubstr("SP=2"));
}

TEST(PlannerTest, RejectsAnIllegalRequestedSpSize) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  PlannerOptions options;
  options.sp_sizes = {3};
  absl::StatusOr<Plan> plan = PlanWith(cost_model, {1000}, options);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("SP size 3"));
}

TEST(PlannerTest, ModelThatDoesNotFitIsResourceExhausted) {
  const CostModel cost_model = MakeCostModel("llama3-70b", 4, 8);
  absl::StatusOr<Plan> plan = PlanWith(cost_model, {1000});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plan.status().message(), HasSubstr("llama3-70b"));
}

}  // namespace
}  // namespace dcp
