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

TEST(MemoryModelTest, CommunicatorsCountInStaticBytesAndShrinkTheTokenBudget) {
  const ModelSpec spec = Spec();
  MemoryParams params = DefaultMemoryParams(spec);
  const MemoryModel without(spec, params, /*world_size=*/8);
  params.communicator_bytes = kNcclCommunicatorBytesH200;
  params.communicators_per_rank = 1 + 4;  // World + 4 cached SP groups.
  const MemoryModel with(spec, params, /*world_size=*/8);
  EXPECT_DOUBLE_EQ(with.StaticBytes() - without.StaticBytes(), 5 * 0.6e9);
  const double budget = without.StaticBytes() + 4e9;
  EXPECT_GT(without.MaxTokensPerRank(0, budget),
            with.MaxTokensPerRank(0, budget));
  // 3 GB of communicators leave 1 GB of the 4 GB for activations.
  EXPECT_NEAR(static_cast<double>(with.MaxTokensPerRank(0, budget)) /
                  without.MaxTokensPerRank(0, budget),
              0.25, 0.01);
  // A budget the communicators alone exceed fits nothing.
  EXPECT_EQ(with.MaxTokensPerRank(0, without.StaticBytes() + 2e9), 0);
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
  EXPECT_DOUBLE_EQ(model.ActivationBytesPerToken(0), 2 * 1000 + 300);
  // End of forward (1000 + 300) outweighs the recompute (1000 + 200).
  EXPECT_DOUBLE_EQ(model.ActivationBytesPerToken(1), 10 + 1000 + 300);
  // Every layer recomputed: the recompute's working set sets the peak.
  EXPECT_DOUBLE_EQ(model.ActivationBytesPerToken(2), 2 * 10 + 1000 + 200);
  EXPECT_EQ(model.MinCheckpointedLayers(/*tokens_per_rank=*/1,
                                        /*budget_bytes=*/1500),
            1);
  EXPECT_EQ(model.MinCheckpointedLayers(1, 1200), std::nullopt);
}

}  // namespace
}  // namespace dcp
