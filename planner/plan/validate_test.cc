#include "planner/plan/validate.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/plan.h"
#include "planner/plan/plan_testing.h"
#include "planner/plan/test_cost_model.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

GroupPlan Group(std::vector<int> ranks,
                std::vector<std::vector<int>> micro_batches,
                int checkpointed_layers) {
  GroupPlan group;
  group.ranks = std::move(ranks);
  for (std::vector<int>& indices : micro_batches) {
    MicroBatchPlan micro_batch;
    micro_batch.sequence_indices = std::move(indices);
    micro_batch.checkpointed_layers = checkpointed_layers;
    group.micro_batches.push_back(std::move(micro_batch));
  }
  return group;
}

std::vector<int> Range(int first, int count) {
  std::vector<int> ranks;
  for (int i = 0; i < count; ++i) ranks.push_back(first + i);
  return ranks;
}

// 2 nodes x 8 GPUs: SP=4, SP=4, SP=8 over seven sequences.
class ValidatePlanTest : public ::testing::Test {
 protected:
  ValidatePlanTest() : cost_model_(MakeCostModel("llama3-8b", 2, 8)) {
    plan_.strategy = "hand-made";
    plan_.groups.push_back(Group(Range(0, 4), {{0, 1}, {2}}, 32));
    plan_.groups.push_back(Group(Range(4, 4), {{3}}, 0));
    plan_.groups.push_back(Group(Range(8, 8), {{4}, {5, 6}}, 32));
  }

  absl::Status Validate() const {
    return ValidatePlan(cost_model_, lengths_, plan_);
  }

  CostModel cost_model_;
  std::vector<int64_t> lengths_ = {2048, 4096, 8192, 1024, 65536, 16384, 512};
  Plan plan_;
};

TEST_F(ValidatePlanTest, HandMadePlanIsValid) {
  EXPECT_TRUE(Validate().ok()) << Validate();
}

TEST_F(ValidatePlanTest, ValidWithPredictionsFilledIn) {
  PredictPlan(cost_model_, lengths_, plan_);
  EXPECT_TRUE(Validate().ok()) << Validate();
  EXPECT_LE(MaxPeakBytes(plan_), cost_model_.MemoryBudgetBytes());
}

TEST_F(ValidatePlanTest, DuplicateSequence) {
  plan_.groups[1].micro_batches[0].sequence_indices.push_back(5);
  const absl::Status status = Validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("sequence 5 is planned twice"),
                    HasSubstr("group 1 (ranks 4-7, SP=4) micro-batch 0"),
                    HasSubstr("group 2 (ranks 8-15, SP=8) micro-batch 1")));
}

TEST_F(ValidatePlanTest, MissingSequence) {
  plan_.groups[2].micro_batches[1].sequence_indices = {5};
  const absl::Status status = Validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("1 of 7 sequences are in no micro-batch: 6"));
}

TEST_F(ValidatePlanTest, SequenceIndexOutOfRange) {
  plan_.groups[0].micro_batches[1].sequence_indices = {2, 7};
  EXPECT_THAT(Validate().message(),
              AllOf(HasSubstr("group 0 (ranks 0-3, SP=4) micro-batch 1"),
                    HasSubstr("sequence index 7 is outside [0, 7)")));
  plan_.groups[0].micro_batches[1].sequence_indices = {2, -1};
  EXPECT_THAT(Validate().message(), HasSubstr("sequence index -1"));
}

TEST_F(ValidatePlanTest, RankOutsideWorld) {
  plan_.groups[2].ranks = Range(8, 7);
  plan_.groups[2].ranks.push_back(16);
  const absl::Status status = Validate();
  EXPECT_THAT(status.message(), AllOf(HasSubstr("rank 16 is outside [0, 16)"),
                                      HasSubstr("group 2")));
}

TEST_F(ValidatePlanTest, RankInTwoGroups) {
  plan_.groups[1].ranks = Range(0, 4);
  EXPECT_THAT(Validate().message(),
              AllOf(HasSubstr("group 1 (ranks 0-3, SP=4): rank 0 is already "
                              "in group 0"),
                    HasSubstr("4 of 16 ranks are in no group: 4, 5, 6, 7")));
}

TEST_F(ValidatePlanTest, RankRepeatedInsideGroup) {
  plan_.groups[0].ranks = {0, 1, 2, 2};
  EXPECT_THAT(Validate().message(), HasSubstr("rank 2 appears twice"));
}

TEST_F(ValidatePlanTest, RankInNoGroup) {
  plan_.groups[2] = Group(Range(8, 4), {{4}, {5, 6}}, 32);
  EXPECT_THAT(Validate().message(),
              HasSubstr("4 of 16 ranks are in no group: 12, 13, 14, 15"));
}

TEST_F(ValidatePlanTest, SpSizeMustDivideAttentionHeads) {
  // llama3-8b has 32 attention heads: a group of 3 cannot split them.
  plan_.groups[0] = Group({0, 1, 2}, {{0, 1}, {2}}, 32);
  plan_.groups.push_back(Group({3}, {}, 0));
  EXPECT_THAT(Validate().message(),
              AllOf(HasSubstr("group 0 (ranks 0-2, SP=3): SP size 3 must "
                              "divide the model's 32 attention heads"),
                    ::testing::Not(HasSubstr("group 3"))));
}

TEST(ValidatePlanKvCopiesTest, SpBeyondTheKvHeadsIsValid) {
  // llama3-8b's 8 KV heads: a group of 16 (two whole nodes) replicates each
  // KV head twice, and its memory is priced with the copies.
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  const std::vector<int64_t> lengths = {131072, 4096};
  Plan plan;
  plan.groups.push_back(Group(Range(0, 16), {{0}}, 32));
  plan.groups.push_back(Group(Range(16, 16), {{1}}, 0));
  EXPECT_TRUE(IsValidPlan(cost_model, lengths, plan));
}

TEST_F(ValidatePlanTest, GroupMustBeAlignedInsideNode) {
  plan_.groups[0] = Group({0, 1}, {{0, 1}, {2}}, 32);
  plan_.groups[1] = Group({2, 3, 4, 5}, {{3}}, 0);
  plan_.groups.push_back(Group({6, 7}, {}, 0));
  EXPECT_THAT(Validate().message(),
              AllOf(HasSubstr("group 1 (ranks 2-5, SP=4)"),
                    HasSubstr("starting at a multiple of 4")));
}

TEST_F(ValidatePlanTest, GroupMustBeContiguous) {
  plan_.groups[0] = Group({0, 1, 2, 4}, {{0, 1}, {2}}, 32);
  plan_.groups[1] = Group({3, 5, 6, 7}, {{3}}, 0);
  EXPECT_THAT(Validate().message(),
              HasSubstr("group 0 (ranks [0,1,2,4], SP=4): a group of 4 ranks "
                        "must be a contiguous ascending block"));
}

TEST(ValidatePlanNodesTest, LargeGroupMustCoverWholeNodes) {
  // 4 nodes x 4 GPUs: a group of 8 must hold two whole nodes.
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 4);
  const std::vector<int64_t> lengths = {4096, 4096};
  Plan plan;
  plan.groups.push_back(Group({0, 1}, {{0}}, 32));
  plan.groups.push_back(Group(Range(2, 8), {{1}}, 32));
  plan.groups.push_back(Group({10, 11}, {}, 0));
  plan.groups.push_back(Group(Range(12, 4), {}, 0));
  EXPECT_THAT(ValidatePlan(cost_model, lengths, plan).message(),
              AllOf(HasSubstr("group 1 (ranks 2-9, SP=8)"),
                    HasSubstr("holds only part of node(s) 0, 2")));

  // Nodes 0 and 2 whole is fine.
  Plan whole_nodes;
  std::vector<int> ranks = Range(0, 4);
  for (int rank : Range(8, 4)) ranks.push_back(rank);
  whole_nodes.groups.push_back(Group(ranks, {{0}}, 32));
  whole_nodes.groups.push_back(Group(Range(4, 4), {{1}}, 32));
  whole_nodes.groups.push_back(Group(Range(12, 4), {}, 0));
  EXPECT_TRUE(ValidatePlan(cost_model, lengths, whole_nodes).ok());
}

TEST(ValidatePlanNodesTest, LargeGroupSizeMustBeMultipleOfNode) {
  // A model with 48 attention heads, so that SP=6 passes the head check and only
  // the node rule rejects it on 2 nodes x 4 GPUs.
  absl::StatusOr<ModelSpec> model = ModelPreset("llama3-8b");
  ASSERT_TRUE(model.ok());
  model->num_attention_heads = 48;
  model->num_kv_heads = 12;
  model->hidden_size = 48 * 128;
  absl::StatusOr<CostModel> cost_model =
      CostModel::CreateDefault(*model, H200Cluster(2, 4));
  ASSERT_TRUE(cost_model.ok()) << cost_model.status();
  Plan plan;
  plan.groups.push_back(Group(Range(0, 6), {{0}}, 0));
  plan.groups.push_back(Group({6, 7}, {}, 0));
  EXPECT_THAT(ValidatePlan(*cost_model, {1024}, plan).message(),
              HasSubstr("group 0 (ranks 0-5, SP=6): a group of 6 ranks spans "
                        "nodes, so its size must be a multiple of the 4 GPUs "
                        "per node"));
}

TEST_F(ValidatePlanTest, CheckpointedLayersOutOfRange) {
  plan_.groups[1].micro_batches[0].checkpointed_layers = 33;
  EXPECT_THAT(Validate().message(),
              AllOf(HasSubstr("group 1 (ranks 4-7, SP=4) micro-batch 0: "
                              "checkpointed_layers = 33 is outside [0, 32]")));
  plan_.groups[1].micro_batches[0].checkpointed_layers = -1;
  EXPECT_THAT(Validate().message(), HasSubstr("checkpointed_layers = -1"));
}

TEST_F(ValidatePlanTest, EmptyMicroBatch) {
  plan_.groups[1].micro_batches.push_back(MicroBatchPlan{});
  EXPECT_THAT(Validate().message(),
              HasSubstr("group 1 (ranks 4-7, SP=4) micro-batch 1 is empty"));
}

TEST_F(ValidatePlanTest, GroupWithoutMicroBatchesIsFine) {
  plan_.groups[1].micro_batches.clear();
  plan_.groups[0].micro_batches[1].sequence_indices = {2, 3};
  EXPECT_TRUE(Validate().ok()) << Validate();
}

TEST_F(ValidatePlanTest, MemoryOverflowRecomputedNotTrusted) {
  // A 256K-token sequence on one SP=4 group without recompute cannot fit;
  // the plan's own (zero) predictions must not hide it.
  lengths_[3] = 262144;
  const absl::Status status = Validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("group 1 (ranks 4-7, SP=4) micro-batch 0: peak "
                              "memory"),
                    HasSubstr("exceeds the budget of"),
                    HasSubstr("65536 tokens per rank, 0 of 32 layers")));
}

TEST_F(ValidatePlanTest, StructureAloneSkipsOnlyTheMemoryCheck) {
  const ModelSpec& model = cost_model_.model();
  const ClusterSpec& cluster = cost_model_.cluster();
  EXPECT_TRUE(ValidatePlanStructure(model, cluster, lengths_, plan_).ok());
  lengths_[3] = 262144;  // overflows memory (see above), structure is fine
  EXPECT_FALSE(Validate().ok());
  EXPECT_TRUE(ValidatePlanStructure(model, cluster, lengths_, plan_).ok());
  plan_.groups[1].micro_batches[0].sequence_indices.push_back(9);
  const absl::Status status =
      ValidatePlanStructure(model, cluster, lengths_, plan_);
  EXPECT_THAT(status.message(),
              HasSubstr("sequence index 9 is outside [0, 7)"));
  EXPECT_THAT(status.message(), Not(HasSubstr("peak memory")));
}

TEST_F(ValidatePlanTest, NonPositiveLength) {
  lengths_[2] = 0;
  EXPECT_THAT(Validate().message(),
              HasSubstr("sequence 2 has length 0 tokens"));
}

TEST_F(ValidatePlanTest, ListsSeveralProblems) {
  plan_.groups[0].micro_batches[0].checkpointed_layers = 99;
  plan_.groups[2].micro_batches[1].sequence_indices = {5, 5};
  const absl::Status status = Validate();
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("problems"), HasSubstr("= 99"),
                    HasSubstr("sequence 5 is planned twice"),
                    HasSubstr("sequences are in no micro-batch: 6")));
}

TEST(ValidatePlanEdgeTest, EmptyPlanAndBatch) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const absl::Status status = ValidatePlan(cost_model, {}, Plan{});
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("no sequences"), HasSubstr("no groups")));
  Plan no_ranks;
  no_ranks.groups.push_back(GroupPlan{});
  EXPECT_THAT(ValidatePlan(cost_model, {10}, no_ranks).message(),
              HasSubstr("group 0 has no ranks"));
}

}  // namespace
}  // namespace dcp
