#include "planner/strategies/videosys_dcp.h"

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/test_cost_model.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

double SequencesPerGpuSecond(int sp_size, int batch_size, double seconds) {
  return batch_size / (sp_size * seconds);
}

TEST(VideoSysDcpTest, ProfileKeepsTheBestThroughputThatFits) {
  CostModel cost_model = MakeCostModel("video-dit-1b", 2, 8);
  for (int64_t length : {256, 5265, 42120, 183600}) {
    SCOPED_TRACE(length);
    absl::StatusOr<VideoSysBucketProfile> profile =
        ProfileVideoSysBucket(cost_model, {}, length);
    ASSERT_TRUE(profile.ok()) << profile.status();
    EXPECT_LE(profile->sp_size, 8) << "inside a node while one fits there";
    MicroBatchShape shape;
    shape.sp_size = profile->sp_size;
    for (int i = 0; i < profile->batch_size; ++i) shape.AddSequence(length);
    EXPECT_EQ(profile->checkpointed_layers,
              *cost_model.MinCheckpointedLayers(shape));
    EXPECT_DOUBLE_EQ(profile->seconds,
                     cost_model.MicroBatch(shape, profile->checkpointed_layers)
                         .total_seconds);
    const double best = SequencesPerGpuSecond(
        profile->sp_size, profile->batch_size, profile->seconds);
    // No SP size inside a node with a power-of-two batch that fits beats it.
    for (int sp_size : {1, 2, 4, 8}) {
      for (int batch_size = 1; batch_size <= 4096; batch_size *= 2) {
        MicroBatchShape other;
        other.sp_size = sp_size;
        for (int i = 0; i < batch_size; ++i) other.AddSequence(length);
        std::optional<int> layers = cost_model.MinCheckpointedLayers(other);
        if (!layers) break;
        EXPECT_LE(SequencesPerGpuSecond(
                      sp_size, batch_size,
                      cost_model.MicroBatch(other, *layers).total_seconds),
                  best * (1 + 1e-12))
            << "SP " << sp_size << " x " << batch_size;
      }
    }
  }
  EXPECT_THAT(
      std::string(ProfileVideoSysBucket(cost_model, {}, int64_t{1} << 30)
                      .status()
                      .message()),
      HasSubstr("fits memory on no SP size"));
}

TEST(VideoSysDcpTest, GroupsRunOneBucketEachAtItsProfile) {
  CostModel cost_model = MakeCostModel("video-dit-1b", 2, 8);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 40; ++i) lengths.push_back(256);
  for (int i = 0; i < 20; ++i) lengths.push_back(5265);
  for (int i = 0; i < 10; ++i) lengths.push_back(42120);
  lengths.push_back(183600);
  absl::StatusOr<PhasedPlan> plan = PlanVideoSysDcp(cost_model, {}, lengths);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->strategy, "videosys-dcp");
  ASSERT_TRUE(ValidatePhasedPlan(cost_model, lengths, *plan).ok());
  for (const Plan& phase : plan->phases) {
    for (const GroupPlan& group : phase.groups) {
      if (group.micro_batches.empty()) continue;
      const int64_t length =
          lengths[group.micro_batches[0].sequence_indices[0]];
      const VideoSysBucketProfile profile =
          *ProfileVideoSysBucket(cost_model, {}, length);
      EXPECT_EQ(group.sp_size(), profile.sp_size) << length;
      for (const MicroBatchPlan& micro_batch : group.micro_batches) {
        EXPECT_LE(micro_batch.sequence_indices.size(),
                  static_cast<size_t>(profile.batch_size));
        EXPECT_EQ(micro_batch.checkpointed_layers, profile.checkpointed_layers);
        for (int index : micro_batch.sequence_indices) {
          EXPECT_EQ(lengths[index], length) << "one bucket per group";
        }
      }
    }
  }
  // The first iteration starts with the largest SP size: the longest clip's
  // bucket.
  EXPECT_EQ(plan->phases[0].groups[0].sp_size(),
            ProfileVideoSysBucket(cost_model, {}, 183600)->sp_size);
  EXPECT_EQ(plan->phases[0].groups[0].micro_batches[0].sequence_indices,
            std::vector<int>({70}));
  double step =
      plan->exposed_allreduce_seconds + cost_model.OptimizerStepSeconds();
  for (const Plan& phase : plan->phases) step += phase.slowest_group_seconds;
  EXPECT_DOUBLE_EQ(plan->predicted_step_seconds, step);
}

TEST(VideoSysDcpTest, TextLengthsAreBinnedByPowersOfTwo) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 60; ++i) lengths.push_back(700 + 97 * i);
  lengths.push_back(40000);
  absl::StatusOr<PhasedPlan> plan = PlanVideoSysDcp(cost_model, {}, lengths);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(ValidatePhasedPlan(cost_model, lengths, *plan).ok());
  auto bin = [](int64_t length) {
    int64_t p = 1;
    while (p < length) p *= 2;
    return p;
  };
  for (const Plan& phase : plan->phases) {
    for (const GroupPlan& group : phase.groups) {
      std::set<int64_t> bins;
      for (const MicroBatchPlan& micro_batch : group.micro_batches) {
        for (int index : micro_batch.sequence_indices) {
          bins.insert(bin(lengths[index]));
        }
      }
      EXPECT_LE(bins.size(), 1u);
    }
  }
}

TEST(VideoSysDcpTest, RejectsBadOptions) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  VideoSysOptions options;
  options.max_accumulation = 0;
  EXPECT_EQ(PlanVideoSysDcp(cost_model, {}, {1024}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(PlanVideoSysDcp(cost_model, {}, {}).ok());
}

}  // namespace
}  // namespace dcp
