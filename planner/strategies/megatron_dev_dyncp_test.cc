#include "planner/strategies/megatron_dev_dyncp.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/test_cost_model.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

PackedCpOptions Options(int64_t cap, int largest_cp) {
  PackedCpOptions options;
  options.max_tokens_per_rank = cap;
  options.largest_cp_size = largest_cp;
  return options;
}

// (first rank, size, sequence indices) of one group.
struct G {
  int first_rank;
  int size;
  std::vector<int> sequences;
};
void ExpectRound(const PackedCpRound& round, const std::vector<G>& expected) {
  ASSERT_EQ(round.groups.size(), expected.size());
  for (size_t g = 0; g < expected.size(); ++g) {
    EXPECT_EQ(round.groups[g].first_rank, expected[g].first_rank) << g;
    EXPECT_EQ(round.groups[g].size, expected[g].size) << g;
    EXPECT_EQ(round.groups[g].sequence_indices, expected[g].sequences) << g;
  }
}

TEST(MegatronDevDynCpTest, PacksShortSequencesAndDoublesTheFirstSmallestGroup) {
  // Cap 1000 tokens per rank on 4 ranks. Round 1: the 4000-token sequence
  // needs all 4 ranks, which it fills to the cap: nothing else joins.
  // Round 2 (reference load 1000 x 1000): the two 1000s take a rank each
  // (packing them would exceed the cap), the first 500 a third rank and the
  // second 500 packs beside it (projected max 1e6 either way: the first
  // choice, joining, wins); the free fourth rank doubles the first CP-1
  // group, and the others move up.
  const std::vector<int64_t> lengths = {500, 4000, 1000, 500, 1000};
  absl::StatusOr<std::vector<PackedCpRound>> rounds =
      ScheduleMegatronDevDynCp(lengths, /*world_size=*/4, Options(1000, 4));
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 2u);
  ExpectRound((*rounds)[0], {{0, 4, {1}}});
  ExpectRound((*rounds)[1], {{0, 2, {2}}, {2, 1, {4}}, {3, 1, {0, 3}}});
}

TEST(MegatronDevDynCpTest, ASequenceThatCannotPackOpensAGroupOnTheFreeRanks) {
  // Cap 1000 on 4 ranks. The 2000-token sequence opens a CP-2 group (load
  // 2e6, cap 2.1e6). The 1400-token sequence needs CP 2 at least; packing
  // it into the first group would exceed the per-rank cap, so it takes the
  // two free ranks (load 9.8e5) and the round is full.
  const std::vector<int64_t> lengths = {2000, 1400};
  absl::StatusOr<std::vector<PackedCpRound>> rounds =
      ScheduleMegatronDevDynCp(lengths, /*world_size=*/4, Options(1000, 4));
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 1u);
  ExpectRound((*rounds)[0], {{0, 2, {0}}, {2, 2, {1}}});
}

TEST(MegatronDevDynCpTest, RanksNoDoublingReachesIdleForTheRound) {
  // Largest CP 2 on 4 ranks: the lone sequence's group doubles once, then
  // could only grow to 4; ranks 2 and 3 idle.
  absl::StatusOr<std::vector<PackedCpRound>> capped =
      ScheduleMegatronDevDynCp({600}, /*world_size=*/4, Options(1000, 2));
  ASSERT_TRUE(capped.ok()) << capped.status();
  ASSERT_EQ(capped->size(), 1u);
  ExpectRound((*capped)[0], {{0, 2, {0}}});
  // World 3: 600 on rank 0; 500 cannot pack beside it (1,100 > 1,000) and
  // opens rank 1; 100 packs beside the 500 (projected max 3.6e5, against
  // 3.7e5 beside the 600); the free rank 2 doubles rank 0's group and rank
  // 1's group moves up to rank 2.
  absl::StatusOr<std::vector<PackedCpRound>> odd =
      ScheduleMegatronDevDynCp({600, 500, 100}, /*world_size=*/3,
                               Options(1000, 2));
  ASSERT_TRUE(odd.ok()) << odd.status();
  ASSERT_EQ(odd->size(), 1u);
  ExpectRound((*odd)[0], {{0, 2, {0}}, {2, 1, {1, 2}}});
}

TEST(MegatronDevDynCpTest, RejectsBadOptionsNamingThem) {
  const std::vector<int64_t> lengths = {100};
  absl::StatusOr<std::vector<PackedCpRound>> zero_cap =
      ScheduleMegatronDevDynCp(lengths, 4, Options(0, 4));
  EXPECT_THAT(zero_cap.status().message(), HasSubstr("max tokens per rank = 0"));
  absl::StatusOr<std::vector<PackedCpRound>> odd_cp =
      ScheduleMegatronDevDynCp(lengths, 4, Options(100, 3));
  EXPECT_THAT(odd_cp.status().message(), HasSubstr("powers of two"));
  absl::StatusOr<std::vector<PackedCpRound>> too_wide =
      ScheduleMegatronDevDynCp(lengths, 4, Options(100, 8));
  EXPECT_THAT(too_wide.status().message(), HasSubstr("at most the world"));
}

// On random batches: every sequence in exactly one group of one round; each
// round's groups are consecutive rank ranges of power-of-two sizes within
// [least CP, largest], covering every rank; a group of several sequences
// stays within the per-rank cap.
TEST(MegatronDevDynCpTest, RandomBatchesGiveWellFormedRounds) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int world = 1 << std::uniform_int_distribution<int>(0, 6)(rng);
    const int64_t cap = std::uniform_int_distribution<int64_t>(256, 8192)(rng);
    const int count = std::uniform_int_distribution<int>(1, 80)(rng);
    std::lognormal_distribution<double> length(7.0, 1.3);
    std::vector<int64_t> lengths;
    for (int i = 0; i < count; ++i) {
      lengths.push_back(std::clamp<int64_t>(
          static_cast<int64_t>(length(rng)), 1, cap * world));
    }
    absl::StatusOr<std::vector<PackedCpRound>> rounds =
        ScheduleMegatronDevDynCp(lengths, world, Options(cap, world));
    ASSERT_TRUE(rounds.ok()) << rounds.status();
    std::vector<int> seen(lengths.size(), 0);
    for (const PackedCpRound& round : *rounds) {
      std::vector<PackedCpGroup> groups = round.groups;
      std::sort(groups.begin(), groups.end(),
                [](const PackedCpGroup& a, const PackedCpGroup& b) {
                  return a.first_rank < b.first_rank;
                });
      int next_rank = 0;
      for (const PackedCpGroup& group : groups) {
        EXPECT_EQ(group.first_rank, next_rank);
        next_rank += group.size;
        EXPECT_EQ(group.size & (group.size - 1), 0) << group.size;
        EXPECT_FALSE(group.sequence_indices.empty());
        double per_rank = 0;
        for (int index : group.sequence_indices) {
          ++seen[index];
          per_rank += static_cast<double>(lengths[index]) / group.size;
          int least = 1;
          while (static_cast<int64_t>(least) * cap < lengths[index]) least *= 2;
          EXPECT_GE(group.size, least) << lengths[index];
        }
        if (group.sequence_indices.size() > 1) {
          EXPECT_LE(per_rank, static_cast<double>(cap) + 1e-9);
        }
      }
      EXPECT_EQ(next_rank, world);
    }
    EXPECT_THAT(std::vector<int>(seen), ::testing::Each(1));
  }
}

TEST(MegatronDevDynCpTest, PlansArePricedOnTheCriticalPathWithoutBarriers) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  // Many short sequences beside two long ones: several rounds.
  std::vector<int64_t> lengths = {65536, 32768};
  for (int i = 0; i < 40; ++i) lengths.push_back(1024 + 97 * i);
  MegatronDevDynCpSetting setting;
  setting.max_tokens_per_rank = 8192;
  setting.checkpointed_layers = cost_model.model().num_layers;
  absl::StatusOr<PhasedPlan> plan =
      PlanMegatronDevDynCp(cost_model, {}, lengths, setting);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->strategy, "megatron-dyncp");
  EXPECT_TRUE(ValidatePhasedPlan(cost_model, lengths, *plan).ok());
  ASSERT_GE(plan->phases.size(), 2u);
  for (const Plan& phase : plan->phases) {
    for (const GroupPlan& group : phase.groups) {
      EXPECT_LE(group.micro_batches.size(), 1u) << "one packed micro-batch";
    }
  }
  // Without barriers the step is at most the barriered price, and at least
  // the slowest single phase.
  PhasedPlan barriered = *plan;
  PredictPhasedPlan(cost_model, lengths, barriered);
  EXPECT_LE(plan->predicted_step_seconds,
            barriered.predicted_step_seconds + 1e-12);
  double slowest_phase = 0;
  for (const Plan& phase : plan->phases) {
    slowest_phase = std::max(slowest_phase, phase.slowest_group_seconds);
  }
  EXPECT_GE(plan->phases_seconds, slowest_phase - 1e-12);
}

TEST(MegatronDevDynCpTest, CriticalPathStartsAGroupWhenItsLastRankIsFree) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 2);
  // Phase 0: rank 0 runs a long sequence, rank 1 a short one. Phase 1: rank
  // 1 runs another short one, rank 0 nothing. Without barriers rank 1's
  // second sequence starts right after its first; the step ends with rank
  // 0's long sequence.
  const std::vector<int64_t> lengths = {16384, 1024, 1024};
  PhasedPlan plan;
  Plan first;
  first.groups = {GroupPlan{{0}, {MicroBatchPlan{{0}}}},
                  GroupPlan{{1}, {MicroBatchPlan{{1}}}}};
  Plan second;
  second.groups = {GroupPlan{{0}, {}}, GroupPlan{{1}, {MicroBatchPlan{{2}}}}};
  plan.phases = {first, second};
  PredictUnbarrieredPhasedPlan(cost_model, lengths, plan);
  const double long_seconds = plan.phases[0].groups[0].predicted_seconds;
  const double short_seconds = plan.phases[0].groups[1].predicted_seconds;
  ASSERT_GT(long_seconds, 2 * short_seconds);
  EXPECT_DOUBLE_EQ(plan.phases_seconds, long_seconds);
  EXPECT_DOUBLE_EQ(plan.predicted_step_seconds,
                   long_seconds + plan.exposed_allreduce_seconds +
                       cost_model.OptimizerStepSeconds());
  // The barriered price waits for rank 0 before rank 1's second sequence.
  PhasedPlan barriered = plan;
  PredictPhasedPlan(cost_model, lengths, barriered);
  EXPECT_GT(barriered.phases_seconds, plan.phases_seconds);
}

TEST(MegatronDevDynCpTest, TuningTriesTheMemoryCapacityAsACap) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const int64_t capacity = cost_model.MaxTokensPerRank(
      cost_model.model().num_layers, /*sp_size=*/1);
  // One sequence of exactly the capacity: every cap below it splits it over
  // more ranks, so it is among those tried; the best cap is at most it.
  std::vector<std::vector<int64_t>> batches = {{capacity, 4096, 2048, 1024}};
  absl::StatusOr<MegatronDevDynCpSetting> setting =
      TuneMegatronDevDynCp(cost_model, {}, batches);
  ASSERT_TRUE(setting.ok()) << setting.status();
  EXPECT_LE(setting->max_tokens_per_rank, capacity);
  EXPECT_GT(setting->mean_step_seconds, 0);
  EXPECT_THAT(setting->Describe(), HasSubstr("tokens/rank"));
  EXPECT_FALSE(TuneMegatronDevDynCp(cost_model, {}, {}).ok());
}

}  // namespace
}  // namespace dcp
