// Unit tests of the static baselines: the static configuration, `bucket`
// (round-robin, fixed sequences per micro-batch) and `packed` (first-fit
// decreasing, balanced over the data-parallel groups).
#include "planner/strategies/baselines.h"

#include <algorithm>
#include <cstdint>
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

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;

// Deterministic lengths in [low, high].
std::vector<int64_t> Lengths(int count, int64_t low, int64_t high) {
  return LcgLengths(count, low, high, /*seed=*/2024);
}

int64_t TokensPerRankOf(const std::vector<int>& indices,
                        const std::vector<int64_t>& lengths, int sp_size) {
  int64_t tokens = 0;
  for (int i : indices) tokens += (lengths[i] + sp_size - 1) / sp_size;
  return tokens;
}

// What ChooseStaticConfig should return, straight from PeakBytes: the
// smallest legal size on which one longest sequence fits with full
// recompute, and the fewest checkpointed layers for `per_micro_batch` of
// them there; nullopt where nothing fits.
std::optional<StaticConfig> ExpectedStaticConfig(const CostModel& cost_model,
                                                 int64_t longest,
                                                 int per_micro_batch) {
  const int layers = cost_model.model().num_layers;
  const double budget = cost_model.MemoryBudgetBytes();
  const std::vector<int> sizes = *LegalSpSizes(cost_model, {});
  for (int sp : sizes) {
    if (cost_model.PeakBytes(ShapeOf({longest}, sp), layers) > budget) {
      continue;
    }
    const std::vector<int64_t> copies(per_micro_batch, longest);
    const MicroBatchShape worst = ShapeOf(copies, sp);
    for (int k = 0; k <= layers; ++k) {
      if (cost_model.PeakBytes(worst, k) <= budget) return StaticConfig{sp, k};
    }
    return std::nullopt;
  }
  return std::nullopt;
}

std::vector<int> AllIndicesOf(const Plan& plan) {
  std::vector<int> seen;
  for (const GroupPlan& group : plan.groups) {
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      seen.insert(seen.end(), micro_batch.sequence_indices.begin(),
                  micro_batch.sequence_indices.end());
    }
  }
  return seen;
}

std::vector<int> Iota(int count) {
  std::vector<int> indices(count);
  for (int i = 0; i < count; ++i) indices[i] = i;
  return indices;
}

TEST(ChooseStaticConfigTest, SmallestFittingSpAndLeastRecompute) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  for (int64_t longest :
       {int64_t{2000}, int64_t{12000}, int64_t{30000}, int64_t{60000},
        int64_t{100000}, int64_t{150000}, int64_t{400000}}) {
    for (int per_micro_batch : {1, 2}) {
      SCOPED_TRACE(testing::Message() << longest << " tokens, "
                                      << per_micro_batch << " per micro-batch");
      StaticOptions options;
      options.micro_batch_sequences = per_micro_batch;
      absl::StatusOr<StaticConfig> config = ChooseStaticConfig(
          cost_model, options, std::vector<int64_t>{1000, longest, 500});
      std::optional<StaticConfig> expected =
          ExpectedStaticConfig(cost_model, longest, per_micro_batch);
      if (!expected) {
        EXPECT_EQ(config.status().code(), absl::StatusCode::kResourceExhausted);
        continue;
      }
      ASSERT_TRUE(config.ok()) << config.status();
      EXPECT_EQ(config->sp_size, expected->sp_size);
      EXPECT_EQ(config->checkpointed_layers, expected->checkpointed_layers);
    }
  }
}

TEST(ChooseStaticConfigTest, KnownSettingsForLlama8bOnFourNodes) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  const int64_t per_rank_full = cost_model.MaxTokensPerRank(32, /*sp_size=*/1);
  // Short: SP 1, nothing recomputed.
  absl::StatusOr<StaticConfig> short_config = ChooseStaticConfig(
      cost_model, StaticOptions{}, std::vector<int64_t>{1500, 2000});
  ASSERT_TRUE(short_config.ok()) << short_config.status();
  EXPECT_EQ(short_config->sp_size, 1);
  EXPECT_EQ(short_config->checkpointed_layers, 0);
  // Just over what one GPU holds with full recompute: SP 2.
  absl::StatusOr<StaticConfig> over_one = ChooseStaticConfig(
      cost_model, StaticOptions{}, std::vector<int64_t>{per_rank_full + 1});
  ASSERT_TRUE(over_one.ok()) << over_one.status();
  EXPECT_EQ(over_one->sp_size, 2);
  // At exactly what one GPU holds with full recompute: SP 1, and the least
  // recompute that fits is every layer but the last (its activations are
  // freed before the recompute, so checkpointing it too only adds its input).
  absl::StatusOr<StaticConfig> at_one = ChooseStaticConfig(
      cost_model, StaticOptions{}, std::vector<int64_t>{per_rank_full});
  ASSERT_TRUE(at_one.ok()) << at_one.status();
  EXPECT_EQ(at_one->sp_size, 1);
  EXPECT_EQ(at_one->checkpointed_layers, 31);
}

TEST(ChooseStaticConfigTest, WorkloadMaximumAboveTheBatchWins) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  const std::vector<int64_t> lengths = {1500, 2000};
  StaticOptions options;
  options.workload_max_length_tokens = 100000;
  absl::StatusOr<StaticConfig> config =
      ChooseStaticConfig(cost_model, options, lengths);
  ASSERT_TRUE(config.ok()) << config.status();
  std::optional<StaticConfig> expected =
      ExpectedStaticConfig(cost_model, 100000, 1);
  ASSERT_TRUE(expected.has_value());
  EXPECT_EQ(config->sp_size, expected->sp_size);
  EXPECT_EQ(config->sp_size, 2);
  EXPECT_EQ(config->checkpointed_layers, expected->checkpointed_layers);
  EXPECT_GT(config->checkpointed_layers, 0);

  // The bucket plan of the short batch uses that configuration.
  absl::StatusOr<Plan> bucket = PlanBucket(cost_model, lengths, options);
  ASSERT_TRUE(bucket.ok()) << bucket.status();
  ASSERT_EQ(bucket->groups.size(), 16u);
  for (const GroupPlan& group : bucket->groups) {
    EXPECT_EQ(group.sp_size(), 2);
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      EXPECT_EQ(micro_batch.checkpointed_layers, config->checkpointed_layers);
    }
  }
}

TEST(ChooseStaticConfigTest, BatchLongerThanTheWorkloadMaximumRaisesIt) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  StaticOptions options;
  options.workload_max_length_tokens = 2000;
  absl::StatusOr<StaticConfig> config = ChooseStaticConfig(
      cost_model, options, std::vector<int64_t>{1000, 150000});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sp_size,
            ExpectedStaticConfig(cost_model, 150000, 1)->sp_size);
  EXPECT_EQ(config->sp_size, 4);
}

TEST(ChooseStaticConfigTest, Errors) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  for (int per_micro_batch : {0, -1}) {
    StaticOptions options;
    options.micro_batch_sequences = per_micro_batch;
    const std::vector<int64_t> lengths = {1000};
    absl::StatusOr<StaticConfig> config =
        ChooseStaticConfig(cost_model, options, lengths);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(config.status().message(), HasSubstr("at least 1"));
    EXPECT_EQ(PlanBucket(cost_model, lengths, options).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(PlanPacked(cost_model, lengths, options).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(
      ChooseStaticConfig(cost_model, StaticOptions{}, std::vector<int64_t>{})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Plan> zero =
      PlanBucket(cost_model, std::vector<int64_t>{5, 0}, StaticOptions{});
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(), HasSubstr("sequence 1"));
  absl::StatusOr<Plan> too_long =
      PlanPacked(cost_model, std::vector<int64_t>{10'000'000}, StaticOptions{});
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ChooseStaticConfigTest, GivenSpSizeMustBeLegalAndHoldTheLongest) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  const std::vector<int64_t> lengths = {1000, 100000};
  StaticOptions options;
  options.sp_size = 8;
  absl::StatusOr<StaticConfig> config =
      ChooseStaticConfig(cost_model, options, lengths);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sp_size, 8);
  options.sp_size = 3;
  EXPECT_EQ(ChooseStaticConfig(cost_model, options, lengths).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.sp_size = 1;
  absl::StatusOr<StaticConfig> too_small =
      ChooseStaticConfig(cost_model, options, lengths);
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_small.status().message(), HasSubstr("100000"));
}

TEST(PlanBucketTest, DealsRoundRobinOneSequencePerMicroBatch) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  // The longest needs SP 2: 16 data-parallel groups.
  std::vector<int64_t> lengths = Lengths(/*count=*/70, 1000, 8000);
  lengths[5] = 60000;
  absl::StatusOr<StaticConfig> config =
      ChooseStaticConfig(cost_model, StaticOptions{}, lengths);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->sp_size, 2);
  absl::StatusOr<Plan> plan = PlanBucket(cost_model, lengths, StaticOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->strategy, "bucket");
  ASSERT_EQ(plan->groups.size(), 16u);
  for (int g = 0; g < 16; ++g) {
    const GroupPlan& group = plan->groups[g];
    EXPECT_THAT(group.ranks, ElementsAre(2 * g, 2 * g + 1));
    std::vector<int> expected;
    for (int i = g; i < static_cast<int>(lengths.size()); i += 16) {
      expected.push_back(i);
    }
    ASSERT_EQ(group.micro_batches.size(), expected.size()) << "group " << g;
    for (size_t m = 0; m < expected.size(); ++m) {
      EXPECT_THAT(group.micro_batches[m].sequence_indices,
                  ElementsAre(expected[m]));
      EXPECT_EQ(group.micro_batches[m].checkpointed_layers,
                config->checkpointed_layers);
    }
  }
  EXPECT_TRUE(IsValidPlan(cost_model, lengths, *plan));
  EXPECT_GT(plan->predicted_step_seconds, 0);
  EXPECT_EQ(plan->lower_bound_seconds, 0);
}

TEST(PlanBucketTest, TwoSequencesPerMicroBatchPairsConsecutiveDeals) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = Lengths(/*count=*/21, 500, 4000);
  StaticOptions options;
  options.micro_batch_sequences = 2;
  absl::StatusOr<StaticConfig> config =
      ChooseStaticConfig(cost_model, options, lengths);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->sp_size, 1);
  absl::StatusOr<Plan> plan = PlanBucket(cost_model, lengths, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->groups.size(), 8u);
  // Group g is dealt g, g+8, g+16; it runs {g, g+8} then {g+16} (if any).
  for (int g = 0; g < 8; ++g) {
    const GroupPlan& group = plan->groups[g];
    EXPECT_THAT(group.ranks, ElementsAre(g));
    if (g + 16 < 21) {
      ASSERT_EQ(group.micro_batches.size(), 2u) << "group " << g;
      EXPECT_THAT(group.micro_batches[0].sequence_indices,
                  ElementsAre(g, g + 8));
      EXPECT_THAT(group.micro_batches[1].sequence_indices, ElementsAre(g + 16));
    } else {
      ASSERT_EQ(group.micro_batches.size(), 1u) << "group " << g;
      EXPECT_THAT(group.micro_batches[0].sequence_indices,
                  ElementsAre(g, g + 8));
    }
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      EXPECT_EQ(micro_batch.checkpointed_layers, config->checkpointed_layers);
    }
  }
  EXPECT_TRUE(IsValidPlan(cost_model, lengths, *plan));
}

TEST(PlanBucketTest, FewerSequencesThanGroupsLeavesGroupsIdle) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = {3000, 1000, 2000};
  absl::StatusOr<Plan> plan = PlanBucket(cost_model, lengths, StaticOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->groups.size(), 8u);
  EXPECT_EQ(plan->groups[0].micro_batches.size(), 1u);
  EXPECT_EQ(plan->groups[2].micro_batches.size(), 1u);
  EXPECT_TRUE(plan->groups[3].micro_batches.empty());
  EXPECT_TRUE(IsValidPlan(cost_model, lengths, *plan));
}

TEST(PlanPackedTest, RespectsCapacityAndBalancesTokens) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  for (const std::vector<int64_t>& lengths :
       {Lengths(/*count=*/300, 200, 6000), Lengths(/*count=*/40, 5000, 45000),
        [] {
          std::vector<int64_t> skewed = Lengths(/*count=*/200, 1000, 2000);
          skewed.push_back(120000);
          skewed.push_back(100000);
          return skewed;
        }()}) {
    SCOPED_TRACE(testing::Message() << lengths.size() << " sequences");
    absl::StatusOr<StaticConfig> config =
        ChooseStaticConfig(cost_model, StaticOptions{}, lengths);
    ASSERT_TRUE(config.ok()) << config.status();
    const int sp = config->sp_size;
    const int64_t capacity =
        cost_model.MaxTokensPerRank(config->checkpointed_layers, sp);
    absl::StatusOr<Plan> plan =
        PlanPacked(cost_model, lengths, StaticOptions{});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->strategy, "packed");
    ASSERT_EQ(plan->groups.size(),
              static_cast<size_t>(cost_model.cluster().NumGpus() / sp));
    EXPECT_THAT(
        AllIndicesOf(*plan),
        UnorderedElementsAreArray(Iota(static_cast<int>(lengths.size()))));
    int64_t largest_micro_batch = 0;
    int64_t most = 0;
    int64_t least = INT64_MAX;
    for (size_t g = 0; g < plan->groups.size(); ++g) {
      const GroupPlan& group = plan->groups[g];
      ASSERT_EQ(group.sp_size(), sp);
      EXPECT_EQ(group.ranks.front(), static_cast<int>(g) * sp);
      int64_t group_tokens = 0;
      for (const MicroBatchPlan& micro_batch : group.micro_batches) {
        const int64_t tokens =
            TokensPerRankOf(micro_batch.sequence_indices, lengths, sp);
        if (micro_batch.sequence_indices.size() > 1) {
          EXPECT_LE(tokens, capacity);
        }
        EXPECT_EQ(micro_batch.checkpointed_layers, config->checkpointed_layers);
        largest_micro_batch = std::max(largest_micro_batch, tokens);
        group_tokens += tokens;
      }
      most = std::max(most, group_tokens);
      least = std::min(least, group_tokens);
    }
    // Largest micro-batch first onto the lightest group: the spread is at
    // most one micro-batch.
    EXPECT_LE(most - least, largest_micro_batch);
    EXPECT_TRUE(IsValidPlan(cost_model, lengths, *plan));
  }
}

TEST(PlanPackedTest, PacksShortSequencesTogether) {
  // 64 sequences of 1,000 tokens at SP 1 with no recompute: as many share a
  // micro-batch as its capacity holds, so packing uses the fewest
  // micro-batches.
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths(64, 1000);
  absl::StatusOr<Plan> plan = PlanPacked(cost_model, lengths, StaticOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const int64_t capacity = cost_model.MaxTokensPerRank(0, /*sp_size=*/1);
  EXPECT_EQ(MicroBatchCount(*plan),
            (64 + capacity / 1000 - 1) / (capacity / 1000));
  EXPECT_TRUE(IsValidPlan(cost_model, lengths, *plan));
}

TEST(BaselinesTest, BothAreLegalOnVideoDitWithWholeNodeGroups) {
  // 9,000,000 tokens need SP 16 (two whole nodes) on video-dit-1b.
  const CostModel cost_model = MakeCostModel("video-dit-1b", 4, 8);
  std::vector<int64_t> lengths = Lengths(/*count=*/50, 10000, 200000);
  lengths.push_back(9'000'000);
  for (auto* plan_static : {&PlanBucket, &PlanPacked}) {
    absl::StatusOr<Plan> plan =
        (*plan_static)(cost_model, lengths, StaticOptions{});
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->groups.size(), 2u);
    EXPECT_EQ(plan->groups[1].ranks.front(), 16);
    EXPECT_TRUE(IsValidPlan(cost_model, lengths, *plan));
  }
}

}  // namespace
}  // namespace dcp
