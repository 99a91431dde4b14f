#include "planner/strategies/megatron_dyncp.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/test_cost_model.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

MegatronDynCpSetting Cap(int64_t max_tokens_per_rank, int layers = 0) {
  MegatronDynCpSetting setting;
  setting.max_tokens_per_rank = max_tokens_per_rank;
  setting.checkpointed_layers = layers;
  return setting;
}

// The SP size each sequence ran at, and the phase it ran in.
struct Placement {
  int sp_size = 0;
  int phase = -1;
};
std::vector<Placement> Placements(const PhasedPlan& plan, size_t sequences) {
  std::vector<Placement> placements(sequences);
  for (int p = 0; p < static_cast<int>(plan.phases.size()); ++p) {
    for (const GroupPlan& group : plan.phases[p].groups) {
      for (const MicroBatchPlan& micro_batch : group.micro_batches) {
        EXPECT_EQ(micro_batch.sequence_indices.size(), 1u)
            << "one micro-batch per sub-sample";
        for (int index : micro_batch.sequence_indices) {
          placements[index] = {group.sp_size(), p};
        }
      }
    }
  }
  return placements;
}

TEST(MegatronDynCpTest, RoundsByCpSizeThenFillEmptyRanksByDoubling) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  // At 4096 tokens per rank: CP 8, 8, 2, 2, 1.
  const std::vector<int64_t> lengths = {32768, 30000, 8192, 8192, 1000};
  absl::StatusOr<PhasedPlan> plan =
      PlanMegatronDynCp(cost_model, {}, lengths, Cap(4096, /*layers=*/4));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(ValidatePhasedPlan(cost_model, lengths, *plan).ok());
  ASSERT_EQ(plan->phases.size(), 2u);
  // Round 1: both CP-8 sub-samples on the one CP-8 group; nothing else
  // can be placed, so the round closes.
  ASSERT_EQ(plan->phases[0].groups.size(), 1u);
  EXPECT_EQ(plan->phases[0].groups[0].sp_size(), 8);
  EXPECT_EQ(plan->phases[0].groups[0].micro_batches.size(), 2u);
  // Round 2: CP 2, 2 and 1 on fresh GPUs leave 3 empty: the CP-1 group
  // doubles to 2, then the first CP-2 group to 4.
  const std::vector<Placement> placements = Placements(*plan, lengths.size());
  EXPECT_EQ(placements[2].sp_size, 4);
  EXPECT_EQ(placements[3].sp_size, 2);
  EXPECT_EQ(placements[4].sp_size, 2);
  for (int i = 2; i < 5; ++i) EXPECT_EQ(placements[i].phase, 1);
  // One recompute setting for every micro-batch.
  for (const Plan& phase : plan->phases) {
    for (const GroupPlan& group : phase.groups) {
      for (const MicroBatchPlan& micro_batch : group.micro_batches) {
        EXPECT_EQ(micro_batch.checkpointed_layers, 4);
      }
    }
  }
  // Barriers: the step is the sum of the rounds' slowest groups (then the
  // all-reduce and one optimizer step).
  EXPECT_DOUBLE_EQ(plan->predicted_step_seconds,
                   plan->phases[0].slowest_group_seconds +
                       plan->phases[1].slowest_group_seconds +
                       plan->exposed_allreduce_seconds +
                       cost_model.OptimizerStepSeconds());
}

TEST(MegatronDynCpTest, RanksRunDifferentMicroBatchCounts) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  // 68 CP-1 sub-samples: fresh GPUs first, then the least-loaded group.
  // Giving back a sub-sample would not narrow the spread: one round.
  const std::vector<int64_t> lengths(68, 1024);
  absl::StatusOr<PhasedPlan> plan =
      PlanMegatronDynCp(cost_model, {}, lengths, Cap(4096));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->phases.size(), 1u);
  std::vector<size_t> counts;
  for (const GroupPlan& group : plan->phases[0].groups) {
    EXPECT_EQ(group.sp_size(), 1);
    counts.push_back(group.micro_batches.size());
  }
  std::sort(counts.begin(), counts.end());
  EXPECT_EQ(counts, std::vector<size_t>({8, 8, 8, 8, 9, 9, 9, 9}));
}

TEST(MegatronDynCpTest, TrimmedSubSampleRunsInTheNextRound) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  // With 65, the one rank of 9 gives its last back (spread 1/9 > 5%): it
  // runs alone in a second round, on all 8 ranks after doubling.
  const std::vector<int64_t> lengths(65, 1024);
  absl::StatusOr<PhasedPlan> plan =
      PlanMegatronDynCp(cost_model, {}, lengths, Cap(4096));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->phases.size(), 2u);
  for (const GroupPlan& group : plan->phases[0].groups) {
    EXPECT_EQ(group.micro_batches.size(), 8u);
  }
  ASSERT_EQ(plan->phases[1].groups.size(), 1u);
  EXPECT_EQ(plan->phases[1].groups[0].sp_size(), 8);
  EXPECT_EQ(plan->phases[1].groups[0].micro_batches.size(), 1u);
}

TEST(MegatronDynCpTest, CpSizeIsClampedToTheLargestLegalSize) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  // 100K tokens at 1024 per rank would need CP 128; SP stops at the 8 GPUs.
  const std::vector<int64_t> lengths = {100000};
  absl::StatusOr<PhasedPlan> plan =
      PlanMegatronDynCp(cost_model, {}, lengths, Cap(1024, /*layers=*/32));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Placements(*plan, 1)[0].sp_size, 8);
  EXPECT_THAT(std::string(PlanMegatronDynCp(cost_model, {}, lengths, Cap(0))
                              .status()
                              .message()),
              HasSubstr("max tokens per rank = 0"));
}

TEST(MegatronDynCpTest, TunedCapIsTheBestOfItsCandidatesWithOneRecompute) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<std::vector<int64_t>> batches = {
      {65536, 16384, 4096, 4096, 2048, 2048, 1024, 1024, 1024, 512, 512, 300},
      {32768, 32768, 8192, 8192, 8192, 1024, 1024, 800, 600, 400}};
  absl::StatusOr<MegatronDynCpSetting> tuned =
      TuneMegatronDynCp(cost_model, {}, batches);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  EXPECT_GE(tuned->max_tokens_per_rank, 512);
  double sum = 0;
  for (const std::vector<int64_t>& batch : batches) {
    absl::StatusOr<PhasedPlan> plan =
        PlanMegatronDynCp(cost_model, {}, batch, *tuned);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(ValidatePhasedPlan(cost_model, batch, *plan).ok());
    sum += plan->predicted_step_seconds;
  }
  EXPECT_NEAR(sum / batches.size(), tuned->mean_step_seconds, 1e-9);
  // No other candidate cap, at the fewest layers that fit it, is faster.
  for (int64_t cap : {512, 1024, 2048, 3072, 4096, 8192, 16384}) {
    for (int layers = 0; layers <= cost_model.model().num_layers; ++layers) {
      double other = 0;
      bool fits = true;
      for (const std::vector<int64_t>& batch : batches) {
        absl::StatusOr<PhasedPlan> plan =
            PlanMegatronDynCp(cost_model, {}, batch, Cap(cap, layers));
        ASSERT_TRUE(plan.ok());
        fits = fits && ValidatePhasedPlan(cost_model, batch, *plan).ok();
        other += plan->predicted_step_seconds;
      }
      if (!fits) continue;
      EXPECT_GE(other / batches.size(), tuned->mean_step_seconds * (1 - 1e-12))
          << "cap " << cap << ", " << layers << " layers";
      break;  // more layers only cost more
    }
  }
}

TEST(MegatronDynCpTest, LeastRecomputePerMicroBatchIsTheGenerousVariant) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<std::vector<int64_t>> batches = {
      {131072, 4096, 2048, 2048, 1024, 1024, 1024, 512, 512}};
  absl::StatusOr<MegatronDynCpSetting> one =
      TuneMegatronDynCp(cost_model, {}, batches);
  absl::StatusOr<MegatronDynCpSetting> least =
      TuneMegatronDynCp(cost_model, {}, batches, true);
  ASSERT_TRUE(one.ok() && least.ok());
  EXPECT_LE(least->mean_step_seconds, one->mean_step_seconds);
  absl::StatusOr<PhasedPlan> plan =
      PlanMegatronDynCp(cost_model, {}, batches[0], *least);
  ASSERT_TRUE(plan.ok());
  for (const Plan& phase : plan->phases) {
    for (const GroupPlan& group : phase.groups) {
      for (const MicroBatchPlan& micro_batch : group.micro_batches) {
        MicroBatchShape shape;
        shape.sp_size = group.sp_size();
        shape.AddSequence(batches[0][micro_batch.sequence_indices[0]]);
        EXPECT_EQ(micro_batch.checkpointed_layers,
                  *cost_model.MinCheckpointedLayers(shape));
      }
    }
  }
}

}  // namespace
}  // namespace dcp
