#include "cost_model/memory_model.h"

#include "cost_model/model_spec.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

ModelSpec Spec() {
  ModelSpec spec;
  spec.name = "test";
  spec.num_layers = 2;
  spec.hidden_size = 64;
  spec.num_attention_heads = 4;
  spec.num_kv_heads = 2;
  spec.ffn_hidden_size = 128;
  spec.vocab_size = 100;
  return spec;
}

TEST(MemoryModelTest, TrainingStateBytesPerPrecision) {
  const ModelSpec spec = Spec();
  const double n = static_cast<double>(spec.ParameterCount());
  MemoryParams params;
  SetTrainingStateBytes(TrainingPrecision::kFp32, /*zero1=*/false, params);
  EXPECT_DOUBLE_EQ(MemoryModel(spec, params, 4).StaticBytes(), n * 16);
  SetTrainingStateBytes(TrainingPrecision::kFp32, /*zero1=*/true, params);
  EXPECT_DOUBLE_EQ(MemoryModel(spec, params, 4).StaticBytes(),
                   n * (4 + 4 + 12.0 / 4));
  SetTrainingStateBytes(TrainingPrecision::kBf16, /*zero1=*/true, params);
  EXPECT_DOUBLE_EQ(MemoryModel(spec, params, 4).StaticBytes(),
                   n * (2 + 4 + 12.0 / 4));
  SetTrainingStateBytes(TrainingPrecision::kBf16, /*zero1=*/false, params);
  EXPECT_DOUBLE_EQ(MemoryModel(spec, params, 4).StaticBytes(), n * 18);
  // The defaults are what the H200 plans assume: bf16 with ZeRO-1.
  MemoryParams defaults;
  SetTrainingStateBytes(TrainingPrecision::kBf16, /*zero1=*/true, params);
  EXPECT_EQ(defaults.weight_bytes_per_parameter,
            params.weight_bytes_per_parameter);
  EXPECT_EQ(defaults.optimizer_bytes_per_parameter,
            params.optimizer_bytes_per_parameter);
  EXPECT_EQ(defaults.zero1_optimizer_sharding, true);
}

// ZeRO-3 shards weights, gradients and optimizer states over the world and
// adds the working set of two gathered units (weights and gradients).
TEST(MemoryModelTest, TrainingStateNamesRoundTrip) {
  for (TrainingPrecision precision :
       {TrainingPrecision::kFp32, TrainingPrecision::kBf16}) {
    EXPECT_EQ(TrainingPrecisionFromName(TrainingPrecisionName(precision)),
              precision);
  }
  for (ParameterSharding sharding :
       {ParameterSharding::kReplicated, ParameterSharding::kZero1,
        ParameterSharding::kZero3}) {
    EXPECT_EQ(ParameterShardingFromName(ParameterShardingName(sharding)),
              sharding);
  }
  EXPECT_EQ(TrainingPrecisionName(TrainingPrecision::kBf16), "bf16");
  EXPECT_EQ(ParameterShardingName(ParameterSharding::kReplicated), "none");
  EXPECT_EQ(TrainingPrecisionFromName("fp16"), std::nullopt);
  EXPECT_EQ(ParameterShardingFromName("zero2"), std::nullopt);
}

TEST(MemoryModelTest, ZeroThreeShardsTheWholeStatePlusTwoGatheredUnits) {
  const ModelSpec spec = Spec();
  const double n = static_cast<double>(spec.ParameterCount());
  // A layer (36,992 parameters) outweighs the 100 x 64 embedding; with a
  // larger vocabulary the head (with the final norm) is the largest unit.
  const int64_t unit = MemoryModel::LargestShardingUnit(spec);
  EXPECT_EQ(unit, spec.ParametersPerLayer());
  ModelSpec wide_vocab = spec;
  wide_vocab.vocab_size = 1000;
  EXPECT_EQ(MemoryModel::LargestShardingUnit(wide_vocab),
            1000 * 64 + 64);
  MemoryParams params;
  SetTrainingStateBytes(TrainingPrecision::kBf16, ParameterSharding::kZero3,
                        params);
  EXPECT_TRUE(params.zero3_parameter_sharding);
  EXPECT_TRUE(params.zero1_optimizer_sharding);
  const MemoryModel model(spec, params, 4);
  const double working_set = 2.0 * static_cast<double>(unit) * (2 + 4);
  EXPECT_DOUBLE_EQ(model.ShardingWorkingSetBytes(), working_set);
  EXPECT_DOUBLE_EQ(model.StaticBytes(), n * 18 / 4 + working_set);
  // fp32: the float32 weight shard is its own master (4 + 4 + 8).
  SetTrainingStateBytes(TrainingPrecision::kFp32, ParameterSharding::kZero3,
                        params);
  EXPECT_DOUBLE_EQ(
      MemoryModel(spec, params, 4).StaticBytes(),
      n * 16 / 4 + 2.0 * static_cast<double>(unit) * (4 + 4));
  // Without ZeRO-3 there is no working set, and the bool setter clears it.
  SetTrainingStateBytes(TrainingPrecision::kBf16, /*zero1=*/true, params);
  EXPECT_FALSE(params.zero3_parameter_sharding);
  EXPECT_EQ(MemoryModel(spec, params, 4).ShardingWorkingSetBytes(), 0);
}

TEST(MemoryModelTest, CommunicatorsCountInStaticBytesAndShrinkTheTokenBudget) {
  const ModelSpec spec = Spec();
  MemoryParams params = DefaultMemoryParams(spec);
  const MemoryModel without(spec, params, /*world_size=*/8);
  params.communicator_bytes = kNcclCommunicatorBytesH200;
  params.communicators_per_rank = 1 + 4;  // World + 4 cached SP groups.
  const MemoryModel with(spec, params, /*world_size=*/8);
  EXPECT_DOUBLE_EQ(with.StaticBytes() - without.StaticBytes(), 5 * 0.6e9);
  const double budget = without.StaticBytes() + 4e9;
  EXPECT_GT(without.MaxTokensPerRank(0, /*sp_size=*/1, budget),
            with.MaxTokensPerRank(0, /*sp_size=*/1, budget));
  // 3 GB of communicators leave 1 GB of the 4 GB for activations.
  EXPECT_NEAR(static_cast<double>(with.MaxTokensPerRank(0, /*sp_size=*/1, budget)) /
                  without.MaxTokensPerRank(0, /*sp_size=*/1, budget),
              0.25, 0.01);
  // A budget the communicators alone exceed fits nothing.
  EXPECT_EQ(with.MaxTokensPerRank(0, /*sp_size=*/1, without.StaticBytes() + 2e9), 0);
}

// NCCL counts 1 + bound communicators of kNcclCommunicatorBytesH200: the
// static bytes grow by exactly that many; Gloo's cost nothing.
TEST(MemoryModelTest, CommunicatorMemoryPerBackendAndBound) {
  const ModelSpec spec = Spec();
  const MemoryParams none = DefaultMemoryParams(spec);
  const double base = MemoryModel(spec, none, /*world_size=*/8).StaticBytes();
  for (int bound : {1, 3, 4, 9}) {
    MemoryParams nccl = none;
    SetCommunicatorMemory(CommunicatorBackend::kNccl, bound, nccl);
    EXPECT_EQ(nccl.communicators_per_rank, 1 + bound);
    EXPECT_EQ(nccl.communicator_bytes, kNcclCommunicatorBytesH200);
    EXPECT_DOUBLE_EQ(
        MemoryModel(spec, nccl, /*world_size=*/8).StaticBytes() - base,
        (1 + bound) * kNcclCommunicatorBytesH200);
  }
  for (int bound : {0, 4}) {
    MemoryParams gloo = none;
    SetCommunicatorMemory(CommunicatorBackend::kGloo, bound, gloo);
    EXPECT_EQ(gloo.communicator_bytes, 0);
    EXPECT_DOUBLE_EQ(MemoryModel(spec, gloo, /*world_size=*/8).StaticBytes(),
                     base);
  }
}

// Spec(): 4 query heads over 2 KV heads. SP 4 holds two copies of each KV
// head: K and V after the all-to-all are twice as large per token in every
// layer that keeps its activations; checkpointed layers keep only their
// input, so they cost the same.
TEST(MemoryModelTest, GroupsBeyondTheKvHeadsStoreReplicatedKeysAndValues) {
  const ModelSpec spec = Spec();
  const MemoryParams params = DefaultMemoryParams(spec);
  const MemoryModel memory(spec, params, /*world_size=*/4);
  const double kv_copy = spec.KvCopyBytesPerTokenPerLayer();
  // dtype 2 bytes x (K + V) x 2 KV heads x head dim 16.
  EXPECT_DOUBLE_EQ(kv_copy, 2.0 * 2 * 2 * 16);
  EXPECT_DOUBLE_EQ(memory.StoredBytesPerTokenPerLayer(1),
                   params.activation_bytes_per_token_per_layer);
  EXPECT_DOUBLE_EQ(memory.StoredBytesPerTokenPerLayer(2),
                   params.activation_bytes_per_token_per_layer);
  EXPECT_DOUBLE_EQ(memory.StoredBytesPerTokenPerLayer(4),
                   params.activation_bytes_per_token_per_layer + kv_copy);
  // No recompute: both layers store the extra copy.
  EXPECT_DOUBLE_EQ(memory.ActivationBytesPerToken(0, 4) -
                       memory.ActivationBytesPerToken(0, 2),
                   2 * kv_copy);
  // One layer checkpointed: the stored layer at the end of forward, or the
  // layer being recomputed (the two phases tie with the default working
  // set): one copy either way.
  EXPECT_DOUBLE_EQ(memory.ActivationBytesPerToken(1, 4) -
                       memory.ActivationBytesPerToken(1, 2),
                   kv_copy);
  // Both checkpointed: only the working set of the layer being recomputed.
  EXPECT_DOUBLE_EQ(memory.ActivationBytesPerToken(2, 4) -
                       memory.ActivationBytesPerToken(2, 2),
                   kv_copy);
  const double budget = memory.StaticBytes() + 1e6;
  EXPECT_LT(memory.MaxTokensPerRank(0, 4, budget),
            memory.MaxTokensPerRank(0, 2, budget));
  EXPECT_DOUBLE_EQ(memory.PeakBytes(1000, 0, 4) - memory.PeakBytes(1000, 0, 2),
                   1000 * 2 * kv_copy);
}

TEST(MemoryModelTest, MinCheckpointedLayersCountsTheKvCopies) {
  const ModelSpec spec = Spec();
  const MemoryModel memory(spec, DefaultMemoryParams(spec), /*world_size=*/4);
  // A budget where SP 2's shard fits without recompute but the same tokens
  // with SP 4's KV copies do not.
  const int64_t tokens = 1000;
  const double budget = memory.PeakBytes(tokens, 0, /*sp_size=*/2);
  EXPECT_EQ(memory.MinCheckpointedLayers(tokens, 2, budget), 0);
  const std::optional<int> at_sp4 = memory.MinCheckpointedLayers(tokens, 4, budget);
  ASSERT_TRUE(at_sp4.has_value());
  EXPECT_GT(*at_sp4, 0);
  EXPECT_LE(memory.PeakBytes(tokens, *at_sp4, 4), budget);
}

// Backward runs from the last layer: when the checkpointed layers are
// recomputed the stored layers' activations are freed, so the peak is the
// larger of the end of forward and the recompute of one layer.
TEST(MemoryModelTest, PeakIsTheLargerOfForwardEndAndRecompute) {
  const ModelSpec spec = Spec();  // 2 layers
  MemoryParams params;
  params.weight_bytes_per_parameter = 0;
  params.gradient_bytes_per_parameter = 0;
  params.optimizer_bytes_per_parameter = 0;
  params.activation_bytes_per_token_per_layer = 1000;
  params.checkpoint_bytes_per_token_per_layer = 10;
  params.logits_bytes_per_token = 300;
  params.backward_working_bytes_per_token = 200;
  const MemoryModel model(spec, params, /*world_size=*/1);
  EXPECT_DOUBLE_EQ(model.ActivationBytesPerToken(0, 1), 2 * 1000 + 300);
  // End of forward (1000 + 300) outweighs the recompute (1000 + 200).
  EXPECT_DOUBLE_EQ(model.ActivationBytesPerToken(1, 1), 10 + 1000 + 300);
  // Every layer recomputed: the recompute's working set sets the peak.
  EXPECT_DOUBLE_EQ(model.ActivationBytesPerToken(2, 1), 2 * 10 + 1000 + 200);
  EXPECT_EQ(model.MinCheckpointedLayers(/*tokens_per_rank=*/1, /*sp_size=*/1,
                                        /*budget_bytes=*/1500),
            1);
  EXPECT_EQ(model.MinCheckpointedLayers(1, 1, 1200), std::nullopt);
}

}  // namespace
}  // namespace dcp
