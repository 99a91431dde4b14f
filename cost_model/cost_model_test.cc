#include "cost_model/cost_model.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/types/span.h"
#include "common/struct_fields.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

ModelSpec Llama8b() { return ModelPreset("llama3-8b").value(); }

CostModel DefaultModel(const ModelSpec& model, const ClusterSpec& cluster) {
  absl::StatusOr<CostModel> cost = CostModel::CreateDefault(model, cluster);
  EXPECT_TRUE(cost.ok()) << cost.status();
  return *std::move(cost);
}

// The H200 defaults are NCCL workers with their default group cache: the
// world plus kDefaultNcclMaxCachedGroups communicators per rank count in
// every micro-batch's peak bytes.
TEST(CostModelTest, DefaultsCountTheNcclCommunicators) {
  const ModelSpec model = Llama8b();
  const ClusterSpec cluster = H200Cluster(1, 8);
  const CostModel cost = DefaultModel(model, cluster);
  const MemoryParams& memory = cost.params().memory;
  EXPECT_EQ(memory.communicator_bytes, kNcclCommunicatorBytesH200);
  EXPECT_EQ(memory.communicators_per_rank, 1 + kDefaultNcclMaxCachedGroups);
  MemoryParams without = memory;
  without.communicator_bytes = 0;
  EXPECT_DOUBLE_EQ(
      cost.memory().StaticBytes() -
          MemoryModel(model, without, cluster.NumGpus()).StaticBytes(),
      (1 + kDefaultNcclMaxCachedGroups) * kNcclCommunicatorBytesH200);
  const MicroBatchShape shape = ShapeOf({4096}, /*sp_size=*/1);
  EXPECT_DOUBLE_EQ(cost.PeakBytes(shape, 0),
                   cost.memory().StaticBytes() +
                       4096 * cost.memory().ActivationBytesPerToken(0, 1));
  // A negative count is refused by name.
  CostParams bad = cost.params();
  bad.memory.communicators_per_rank = -1;
  EXPECT_THAT(ValidateCostParams(bad).message(),
              HasSubstr("memory.communicators_per_rank"));
}

TEST(CostModelTest, MicroBatchTimeGrowsWithTokens) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(1, 8));
  double previous = 0;
  for (int sequences = 1; sequences <= 16; sequences *= 2) {
    const std::vector<int64_t> lengths(sequences, 2048);
    const MicroBatchCost c = cost.MicroBatch(ShapeOf(lengths, /*sp_size=*/1),
                                             /*checkpointed_layers=*/0);
    EXPECT_GT(c.total_seconds, previous) << sequences << " sequences";
    EXPECT_DOUBLE_EQ(c.total_seconds, c.forward_seconds + c.backward_seconds);
    previous = c.total_seconds;
  }
}

TEST(CostModelTest, MicroBatchTimeGrowsWithSumOfSquaredLengths) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(1, 8));
  // 32K tokens each, packed from ever longer sequences.
  double previous = 0;
  for (int64_t length = 1024; length <= 32768; length *= 2) {
    const std::vector<int64_t> lengths(32768 / length, length);
    const MicroBatchShape shape = ShapeOf(lengths, /*sp_size=*/2);
    ASSERT_EQ(shape.tokens_per_rank, 16384);
    const double seconds = cost.MicroBatch(shape, 0).total_seconds;
    EXPECT_GT(seconds, previous) << "length " << length;
    previous = seconds;
  }
}

TEST(CostModelTest, RecomputationCostsTime) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(1, 8));
  const MicroBatchShape shape = ShapeOf({8192, 4096}, /*sp_size=*/4);
  const MicroBatchCost none = cost.MicroBatch(shape, 0);
  const MicroBatchCost some = cost.MicroBatch(shape, 8);
  EXPECT_EQ(none.recompute_seconds, 0);
  EXPECT_GT(some.recompute_seconds, 0);
  EXPECT_NEAR(some.total_seconds - none.total_seconds, some.recompute_seconds,
              1e-12);
  EXPECT_DOUBLE_EQ(some.forward_seconds, none.forward_seconds);
}

TEST(CostModelTest, PerRankComputeFallsAsSequenceParallelismGrows) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(4, 8));
  double previous = 0;
  for (int sp = 32; sp >= 1; sp /= 2) {
    const MicroBatchShape shape = ShapeOf({131072}, sp);
    const double compute = cost.compute().LayerForwardSeconds(shape) +
                           cost.compute().LayerBackwardSeconds(shape) +
                           cost.compute().HeadSeconds(shape);
    EXPECT_GT(compute, previous) << "SP " << sp;
    previous = compute;
  }
}

TEST(CostModelTest, SpComputeScaleScalesOnlyTheComputeAtSpTwoAndAbove) {
  const ModelSpec model = Llama8b();
  const ClusterSpec cluster = H200Cluster(2, 8);
  const CostModel base = DefaultModel(model, cluster);
  CostParams params = base.params();
  params.compute.sp_compute_scale = 1.5;
  params.compute.ulysses_layer_fixed_seconds = 1e-4;
  params.compute.micro_batch_fixed_seconds = 2e-3;
  const CostModel unscaled_params =
      CostModel::Create(model, cluster,
                        [&] {
                          CostParams p = params;
                          p.compute.sp_compute_scale = 1;
                          return p;
                        }())
          .value();
  const CostModel scaled = CostModel::Create(model, cluster, params).value();
  for (int sp : {2, 16}) {
    SCOPED_TRACE(sp);
    const MicroBatchShape shape = ShapeOf({8192, 2048}, sp);
    const MicroBatchCost before = unscaled_params.MicroBatch(shape, 1);
    const MicroBatchCost after = scaled.MicroBatch(shape, 1);
    EXPECT_DOUBLE_EQ(after.communication_seconds, before.communication_seconds);
    EXPECT_NEAR(after.total_seconds - after.communication_seconds,
                1.5 * (before.total_seconds - before.communication_seconds),
                1e-12);
  }
  const MicroBatchShape alone = ShapeOf({8192, 2048}, 1);
  EXPECT_DOUBLE_EQ(scaled.MicroBatch(alone, 1).total_seconds,
                   unscaled_params.MicroBatch(alone, 1).total_seconds);
  params.compute.sp_compute_scale = 0;
  EXPECT_THAT(ValidateCostParams(params).message(),
              HasSubstr("compute.sp_compute_scale"));
}

// Each numeric parameter (by the structs' tables of members) is checked by
// its name: a negative value is refused as "<group>.<field>", as are a zero
// rate and a zero bandwidth; every other parameter may be 0.
template <typename Params>
void ExpectEachParameterChecked(absl::Span<const StructField<Params>> fields,
                                Params CostParams::*group,
                                const std::string& group_name) {
  const CostParams valid =
      DefaultCostParams(Llama8b(), H200Cluster(/*num_nodes=*/2, 8));
  for (const StructField<Params>& field : fields) {
    SCOPED_TRACE(field.name);
    const std::string name = group_name + "." + field.name;
    if (const auto* count = std::get_if<int Params::*>(&field.member)) {
      CostParams bad = valid;
      (bad.*group).**count = -1;
      EXPECT_THAT(ValidateCostParams(bad).message(), HasSubstr(name));
      continue;
    }
    const auto* member = std::get_if<double Params::*>(&field.member);
    if (member == nullptr) continue;  // a switch
    for (const double value : {-1.0, std::nan("")}) {
      CostParams bad = valid;
      (bad.*group).**member = value;
      EXPECT_THAT(ValidateCostParams(bad).message(), HasSubstr(name));
    }
    CostParams zero = valid;
    (zero.*group).**member = 0;
    const bool is_rate = absl::StrContains(field.name, "flops_per_second") ||
                         absl::StrContains(field.name, "bytes_per_second") ||
                         field.name == std::string("sp_compute_scale");
    if (is_rate) {
      EXPECT_THAT(ValidateCostParams(zero).message(),
                  HasSubstr(name + " = 0; it must be a finite number > 0"));
    } else {
      EXPECT_TRUE(ValidateCostParams(zero).ok());
    }
  }
}

TEST(CostModelTest, ValidationChecksEachParameterByName) {
  ExpectEachParameterChecked<ComputeParams>(kComputeParamsFields,
                                            &CostParams::compute, "compute");
  ExpectEachParameterChecked<MemoryParams>(kMemoryParamsFields,
                                           &CostParams::memory, "memory");
  ExpectEachParameterChecked<CommParams>(kCommParamsFields, &CostParams::comm,
                                         "comm");
}

TEST(CostModelTest, AllToAllIsFreeWithoutSequenceParallelism) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(2, 8));
  const MicroBatchShape alone = ShapeOf({65536}, /*sp_size=*/1);
  EXPECT_EQ(cost.UlyssesLayerSeconds(alone), 0);
  EXPECT_EQ(cost.MicroBatch(alone, 4).communication_seconds, 0);
  for (int sp : {2, 4, 8, 16}) {
    const MicroBatchShape shape = ShapeOf({65536}, sp);
    EXPECT_GT(cost.UlyssesLayerSeconds(shape), 0) << "SP " << sp;
    const MicroBatchCost c = cost.MicroBatch(shape, /*checkpointed_layers=*/4);
    // Forward, backward and the recomputed layers' all-to-alls.
    EXPECT_DOUBLE_EQ(c.communication_seconds,
                     (2 * 32 + 4) * cost.UlyssesLayerSeconds(shape));
  }
}

TEST(CostModelTest, InterNodeAllToAllIsSlowerPerByte) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(2, 8));
  EXPECT_FALSE(cost.SpansNodes(8));
  EXPECT_TRUE(cost.SpansNodes(16));
  auto seconds_per_byte = [&](int sp) {
    const MicroBatchShape shape = ShapeOf({262144}, sp);
    const double bytes = cost.model().UlyssesBytesPerTokenPerLayer(sp) *
                         static_cast<double>(shape.tokens_per_rank);
    return cost.UlyssesLayerSeconds(shape) / bytes;
  };
  EXPECT_GT(seconds_per_byte(16), 2 * seconds_per_byte(8));
  // Inside a node, the bus factor (n-1)/n makes larger groups slower per byte.
  EXPECT_GT(seconds_per_byte(8), seconds_per_byte(2));
  EXPECT_EQ(cost.comm().AllToAllSeconds(1e6, /*group_size=*/1, false), 0);
}

// llama3-8b: 32 query heads, 8 KV heads of dimension 128, bf16. SP 16 and 32
// replicate each KV head 2 and 4 times, so K and V (2 x 1024 values per token
// each copy) grow in the all-to-all while Q and the output (2 x 4096) do not.
TEST(CostModelTest, AllToAllBytesGrowWithKvCopiesBeyondTheKvHeads) {
  const ModelSpec model = Llama8b();
  for (int sp : {1, 2, 4, 8}) EXPECT_EQ(model.UlyssesKvCopies(sp), 1) << sp;
  EXPECT_EQ(model.UlyssesKvCopies(16), 2);
  EXPECT_EQ(model.UlyssesKvCopies(32), 4);
  EXPECT_DOUBLE_EQ(model.KvCopyBytesPerTokenPerLayer(), 2.0 * 2 * 1024);
  EXPECT_DOUBLE_EQ(model.UlyssesBytesPerTokenPerLayer(8),
                   2.0 * (2 * 4096 + 2 * 1024));
  EXPECT_DOUBLE_EQ(model.UlyssesBytesPerTokenPerLayer(16),
                   2.0 * (2 * 4096 + 2 * 2 * 1024));
  EXPECT_DOUBLE_EQ(model.UlyssesBytesPerTokenPerLayer(32),
                   2.0 * (2 * 4096 + 4 * 2 * 1024));
  // A count that neither divides nor is a multiple: lcm(6, 4) = 12 heads.
  EXPECT_EQ(UlyssesKvCopiesOf(/*num_kv_heads=*/6, /*sp_size=*/4), 2);

  // The all-to-all time follows: same group (32 GPUs over 4 nodes), priced
  // with the bytes of 4 copies rather than 1.
  const CostModel cost = DefaultModel(model, H200Cluster(4, 8));
  const MicroBatchShape shape = ShapeOf({262144}, /*sp_size=*/32);
  const double bytes = static_cast<double>(shape.tokens_per_rank);
  // Two all-to-alls, as the workers run them: Q, K, V packed, and the
  // output (hidden_size values per token).
  const double output_bytes = model.dtype_bytes * model.hidden_size * bytes;
  EXPECT_DOUBLE_EQ(
      cost.UlyssesLayerSeconds(shape),
      cost.comm().AllToAllSeconds(
          model.UlyssesBytesPerTokenPerLayer(32) * bytes - output_bytes, 32,
          /*inter_node=*/true) +
          cost.comm().AllToAllSeconds(output_bytes, 32, /*inter_node=*/true));
  const double one_copy =
      cost.comm().AllToAllSeconds(
          model.UlyssesBytesPerTokenPerLayer(8) * bytes - output_bytes, 32,
          /*inter_node=*/true) +
      cost.comm().AllToAllSeconds(output_bytes, 32, /*inter_node=*/true);
  EXPECT_GT(cost.UlyssesLayerSeconds(shape), 1.5 * one_copy);
}

TEST(CostModelTest, PeakBytesCountKvCopiesBeyondTheKvHeads) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(4, 8));
  // The same tokens per rank at SP 8 and SP 16: SP 16 stores one more copy
  // of K and V in each of the 32 layers (none checkpointed).
  MicroBatchShape at_sp8 = ShapeOf({65536}, /*sp_size=*/8);
  MicroBatchShape at_sp16 = ShapeOf({131072}, /*sp_size=*/16);
  ASSERT_EQ(at_sp8.tokens_per_rank, at_sp16.tokens_per_rank);
  EXPECT_DOUBLE_EQ(cost.PeakBytes(at_sp16, 0) - cost.PeakBytes(at_sp8, 0),
                   8192.0 * 32 * cost.model().KvCopyBytesPerTokenPerLayer());
  EXPECT_DOUBLE_EQ(cost.MicroBatch(at_sp16, 0).peak_bytes,
                   cost.PeakBytes(at_sp16, 0));
}

TEST(CostModelTest, PeakBytesFallWithCheckpointedLayers) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(1, 8));
  const MicroBatchShape shape = ShapeOf({16384}, /*sp_size=*/1);
  // Each checkpointed layer keeps its input instead of its activations
  // (the recomputed layer's working set replaces the freed stored layers').
  const int layers = cost.model().num_layers;
  for (int k = 1; k < layers; ++k) {
    EXPECT_LT(cost.PeakBytes(shape, k), cost.PeakBytes(shape, k - 1))
        << k << " layers";
  }
  // Checkpointing the last layer too only adds its input: the recompute of
  // one layer already sets the peak.
  EXPECT_DOUBLE_EQ(
      cost.PeakBytes(shape, layers) - cost.PeakBytes(shape, layers - 1),
      cost.params().memory.checkpoint_bytes_per_token_per_layer * 16384);
  EXPECT_DOUBLE_EQ(cost.MicroBatch(shape, 3).peak_bytes,
                   cost.PeakBytes(shape, 3));
}

TEST(CostModelTest, PeakBytesFallAsSequenceParallelismGrows) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(4, 8));
  double previous = 0;
  for (int sp = 32; sp >= 1; sp /= 2) {
    const double peak = cost.PeakBytes(ShapeOf({131072, 1000}, sp), 0);
    EXPECT_GT(peak, previous) << "SP " << sp;
    previous = peak;
  }
  // What does not shrink: weights, gradients, optimizer shard.
  EXPECT_GT(cost.PeakBytes(ShapeOf({1}, 32), 0), cost.memory().StaticBytes());
}

TEST(CostModelTest, MinCheckpointedLayersIsTheLeastThatFits) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(1, 8));
  const double budget = cost.MemoryBudgetBytes();
  int saw_middle = 0;
  for (int64_t tokens = 1024; tokens <= 65536; tokens += 1024) {
    MicroBatchShape shape = ShapeOf({tokens}, /*sp_size=*/1);
    const std::optional<int> k = cost.MinCheckpointedLayers(shape);
    if (!k.has_value()) {
      for (int j = 0; j <= cost.model().num_layers; ++j) {
        EXPECT_GT(cost.PeakBytes(shape, j), budget) << tokens << " tokens";
      }
      continue;
    }
    EXPECT_LE(cost.PeakBytes(shape, *k), budget) << tokens << " tokens";
    for (int j = 0; j < *k; ++j) {
      EXPECT_GT(cost.PeakBytes(shape, j), budget)
          << tokens << " tokens, " << j << " layers";
    }
    if (*k > 1 && *k < cost.model().num_layers) ++saw_middle;
  }
  // The sweep crossed settings that need some but not all layers.
  EXPECT_GT(saw_middle, 5);
}

TEST(CostModelTest, MinCheckpointedLayersIsNulloptWhenNothingFits) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(1, 8));
  const MicroBatchShape huge = ShapeOf({1 << 20}, /*sp_size=*/1);
  EXPECT_GT(cost.PeakBytes(huge, cost.model().num_layers),
            cost.MemoryBudgetBytes());
  EXPECT_EQ(cost.MinCheckpointedLayers(huge), std::nullopt);
  EXPECT_EQ(cost.MinCheckpointedLayers(ShapeOf({1024}, 1)), 0);
}

// A cost model whose activations cost almost nothing per token (a fitted
// model can say so) used to cast a token count past 2^63 to int64, which is
// undefined and gave negative capacities.
TEST(CostModelTest, TokenCountsSaturateInsteadOfWrapping) {
  CostParams params = DefaultCostParams(Llama8b(), H200Cluster(1, 8));
  params.memory.activation_bytes_per_token_per_layer = 1e-30;
  params.memory.checkpoint_bytes_per_token_per_layer = 1e-30;
  params.memory.selective_bytes_per_token_per_layer = 1e-30;
  params.memory.logits_bytes_per_token = 1e-30;
  absl::StatusOr<CostModel> cost =
      CostModel::Create(Llama8b(), H200Cluster(1, 8), params);
  ASSERT_TRUE(cost.ok()) << cost.status();
  EXPECT_EQ(cost->MaxTokensPerRank(0, /*sp_size=*/1),
            std::numeric_limits<int64_t>::max());
  // Shapes add their counts saturating too.
  MicroBatchShape shape =
      ShapeOf({int64_t{1} << 62, int64_t{1} << 62, int64_t{1} << 62},
              /*sp_size=*/1);
  EXPECT_EQ(shape.tokens_per_rank, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(shape.sum_lengths, std::numeric_limits<int64_t>::max());
  shape.Merge(shape);
  EXPECT_EQ(shape.tokens_per_rank, std::numeric_limits<int64_t>::max());
  // And a micro-batch of them needs more memory than any GPU has.
  EXPECT_EQ(ShapeOf({std::numeric_limits<int64_t>::max()}, /*sp_size=*/8)
                .tokens_per_rank,
            std::numeric_limits<int64_t>::max() / 8 + 1);
  const CostModel plain = DefaultModel(Llama8b(), H200Cluster(1, 8));
  EXPECT_EQ(plain.MinCheckpointedLayers(shape), std::nullopt);
}

TEST(CostModelTest, MaxTokensPerRankIsConsistentWithPeakBytes) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(1, 8));
  const double budget = cost.MemoryBudgetBytes();
  const int layers = cost.model().num_layers;
  int64_t previous = 0;
  for (int k : {1, 2, layers / 2, layers}) {
    const int64_t max_tokens = cost.MaxTokensPerRank(k, /*sp_size=*/1);
    ASSERT_GT(max_tokens, 0) << k;
    EXPECT_LE(cost.memory().PeakBytes(max_tokens, k, 1), budget) << k;
    EXPECT_GT(cost.memory().PeakBytes(max_tokens + 1, k, 1), budget) << k;
    // More recomputation, more tokens.
    EXPECT_GT(max_tokens, previous) << k;
    previous = max_tokens;
  }
  const int64_t no_recompute = cost.MaxTokensPerRank(0, /*sp_size=*/1);
  EXPECT_LE(cost.memory().PeakBytes(no_recompute, 0, 1), budget);
  EXPECT_GT(cost.memory().PeakBytes(no_recompute + 1, 0, 1), budget);
  // SP 16 holds two copies of llama3-8b's 8 KV heads: fewer tokens fit.
  for (int k : {0, 1, layers}) {
    const int64_t at_sp16 = cost.MaxTokensPerRank(k, /*sp_size=*/16);
    EXPECT_LT(at_sp16, cost.MaxTokensPerRank(k, /*sp_size=*/8)) << k;
    EXPECT_LE(cost.memory().PeakBytes(at_sp16, k, 16), budget) << k;
    EXPECT_GT(cost.memory().PeakBytes(at_sp16 + 1, k, 16), budget) << k;
  }
}

TEST(CostModelTest, MaxTokensPerRankIsZeroWhenTheModelStateDoesNotFit) {
  // 70B parameters at 16+ bytes each on one GPU.
  const CostModel cost =
      DefaultModel(ModelPreset("llama3-70b").value(), H200Cluster(1, 1));
  EXPECT_GT(cost.memory().StaticBytes(), cost.MemoryBudgetBytes());
  EXPECT_EQ(cost.MaxTokensPerRank(cost.model().num_layers, /*sp_size=*/1), 0);
  EXPECT_EQ(cost.MinCheckpointedLayers(ShapeOf({1}, 1)), std::nullopt);
}

// FlashAttention-3 on H100, head dim 128, bf16 (../shared/H200-FACTS.md).
struct Fa3Row {
  int64_t length;
  double causal_forward_tflops;
  double non_causal_forward_tflops;
  double backward_tflops;
};
const Fa3Row kFa3Table[] = {
    {512, 292, 467, 316},  {1024, 423, 565, 424}, {2048, 521, 625, 501},
    {4096, 579, 638, 542}, {8192, 602, 646, 559}, {16384, 616, 648, 561},
};

TEST(ComputeModelTest, DefaultAttentionCurvesReproduceFa3Table) {
  const ClusterSpec cluster = H200Cluster(1, 8);
  ModelSpec causal = Llama8b();
  ASSERT_EQ(causal.HeadDim(), 128);
  ModelSpec non_causal = causal;
  non_causal.causal = false;
  const CostModel causal_cost = DefaultModel(causal, cluster);
  const CostModel non_causal_cost = DefaultModel(non_causal, cluster);
  constexpr double kBackward = ComputeModel::kBackwardAttentionFactor;

  // Rate = FLOPs / time of one sequence of that length.
  auto rate = [](const CostModel& cost, int64_t length, bool backward) {
    const double per_squared_token =
        cost.model().AttentionForwardFlopsPerSquaredToken();
    const double quadratic =
        per_squared_token * static_cast<double>(length) * length;
    const double linear = per_squared_token * static_cast<double>(length);
    if (backward) {
      return kBackward * quadratic /
             cost.compute().AttentionBackwardSeconds(kBackward * quadratic,
                                                     kBackward * linear);
    }
    return quadratic /
           cost.compute().AttentionForwardSeconds(quadratic, linear);
  };
  for (const Fa3Row& row : kFa3Table) {
    EXPECT_NEAR(
        rate(causal_cost, row.length, false) / 1e12 / row.causal_forward_tflops,
        1.0, 0.10)
        << "causal forward at " << row.length;
    EXPECT_NEAR(rate(non_causal_cost, row.length, false) / 1e12 /
                    row.non_causal_forward_tflops,
                1.0, 0.10)
        << "non-causal forward at " << row.length;
    EXPECT_NEAR(
        rate(causal_cost, row.length, true) / 1e12 / row.backward_tflops, 1.0,
        0.10)
        << "backward at " << row.length;
  }
}

TEST(ComputeModelTest, GemmRunsAtHalfRateAtHalfEfficiencyTokens) {
  const CostModel cost = DefaultModel(Llama8b(), H200Cluster(1, 8));
  const ComputeParams& params = cost.compute().params();
  const double flops = 1e12;
  const double half_tokens = params.gemm_half_efficiency_tokens;
  EXPECT_DOUBLE_EQ(flops / cost.compute().GemmSeconds(flops, half_tokens),
                   0.5 * params.gemm_flops_per_second);
  // Approaches the asymptote with more tokens and never exceeds it.
  const double big = flops / cost.compute().GemmSeconds(flops, 1e6);
  EXPECT_GT(big, 0.99 * params.gemm_flops_per_second);
  EXPECT_LE(big, params.gemm_flops_per_second);
  EXPECT_LT(params.gemm_flops_per_second, cost.cluster().peak_flops_per_second);
  EXPECT_EQ(cost.compute().GemmSeconds(0, 100), 0);
}

TEST(CostModelTest, GradientAllReduceGrowsWithParameters) {
  const ClusterSpec cluster = H200Cluster(2, 8);
  const CostModel small = DefaultModel(Llama8b(), cluster);
  const CostModel large =
      DefaultModel(ModelPreset("llama3-70b").value(), cluster);
  EXPECT_GT(small.GradientAllReduceSeconds(), 0);
  EXPECT_GT(large.GradientAllReduceSeconds(),
            5 * small.GradientAllReduceSeconds());
  // A single GPU has nothing to reduce.
  EXPECT_EQ(
      DefaultModel(Llama8b(), H200Cluster(1, 1)).GradientAllReduceSeconds(), 0);
}

// With ZeRO-1 the worker reduce-scatters the gradients and all-gathers the
// updated weights instead of all-reducing the gradients: the cost model
// prices those two collectives.
TEST(CostModelTest, ZeroOneGradientSyncIsReduceScatterPlusAllGather) {
  const ModelSpec model = Llama8b();
  const ClusterSpec cluster = H200Cluster(2, 8);
  CostParams params = DefaultCostParams(model, cluster);
  params.comm.reduce_scatter_inter_bus_bytes_per_second = 20e9;
  params.comm.all_gather_inter_bus_bytes_per_second = 40e9;
  params.comm.reduce_scatter_inter_latency_seconds = 1e-3;
  params.comm.all_gather_inter_latency_seconds = 2e-3;
  const double parameters = static_cast<double>(model.ParameterCount());
  const double shard_factor = 15.0 / 16.0;

  params.memory.zero1_optimizer_sharding = true;
  const CostModel zero1 = CostModel::Create(model, cluster, params).value();
  const double gradient_bytes =
      parameters * params.memory.gradient_bytes_per_parameter;
  const double weight_bytes =
      parameters * params.memory.weight_bytes_per_parameter;
  EXPECT_DOUBLE_EQ(zero1.GradientAllReduceSeconds(),
                   1e-3 + gradient_bytes * shard_factor / 20e9 + 2e-3 +
                       weight_bytes * shard_factor / 40e9);
  EXPECT_DOUBLE_EQ(zero1.comm().ReduceScatterSeconds(gradient_bytes, 16, true),
                   1e-3 + gradient_bytes * shard_factor / 20e9);

  params.memory.zero1_optimizer_sharding = false;
  const CostModel replicated =
      CostModel::Create(model, cluster, params).value();
  EXPECT_DOUBLE_EQ(
      replicated.GradientAllReduceSeconds(),
      replicated.comm().AllReduceSeconds(gradient_bytes, 16, true));
  EXPECT_EQ(zero1.comm().AllGatherSeconds(weight_bytes, 1, false), 0);
}

TEST(CostModelTest, CreateRejectsInvalidModelNamingTheField) {
  ModelSpec model = Llama8b();
  model.num_kv_heads = 5;
  absl::StatusOr<CostModel> cost =
      CostModel::CreateDefault(model, H200Cluster(1, 8));
  EXPECT_EQ(cost.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cost.status().message(), HasSubstr("num_kv_heads"));
}

TEST(CostModelTest, CreateRejectsInvalidClusterNamingTheField) {
  ClusterSpec cluster = H200Cluster(1, 8);
  cluster.hbm_bytes_per_second = 0;
  const ModelSpec model = Llama8b();
  absl::StatusOr<CostModel> cost =
      CostModel::Create(model, cluster, DefaultCostParams(model, cluster));
  EXPECT_EQ(cost.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cost.status().message(), HasSubstr("hbm_bytes_per_second"));
}

TEST(CostModelTest, CreateRejectsNonFiniteOrZeroParamsNamingTheField) {
  const ModelSpec model = Llama8b();
  const ClusterSpec cluster = H200Cluster(1, 8);
  ASSERT_TRUE(ValidateCostParams(DefaultCostParams(model, cluster)).ok());

  CostParams params = DefaultCostParams(model, cluster);
  params.compute.gemm_flops_per_second = std::nan("");
  absl::StatusOr<CostModel> cost = CostModel::Create(model, cluster, params);
  EXPECT_EQ(cost.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cost.status().message(),
              HasSubstr("compute.gemm_flops_per_second = nan"));

  params = DefaultCostParams(model, cluster);
  params.comm.all_reduce_inter_bus_bytes_per_second = 0;  // a rate
  EXPECT_THAT(CostModel::Create(model, cluster, params).status().message(),
              HasSubstr("comm.all_reduce_inter_bus_bytes_per_second = 0"));

  params = DefaultCostParams(model, cluster);
  params.comm.all_gather_intra_bus_bytes_per_second = 0;
  EXPECT_THAT(CostModel::Create(model, cluster, params).status().message(),
              HasSubstr("comm.all_gather_intra_bus_bytes_per_second = 0"));
  params = DefaultCostParams(model, cluster);
  params.comm.reduce_scatter_inter_latency_seconds = -1;
  EXPECT_THAT(CostModel::Create(model, cluster, params).status().message(),
              HasSubstr("comm.reduce_scatter_inter_latency_seconds = -1"));

  params = DefaultCostParams(model, cluster);
  params.memory.fixed_bytes = 0;  // not a rate: 0 is allowed
  EXPECT_TRUE(CostModel::Create(model, cluster, params).ok());
  params.memory.fixed_bytes = std::numeric_limits<double>::infinity();
  EXPECT_THAT(CostModel::Create(model, cluster, params).status().message(),
              HasSubstr("memory.fixed_bytes = inf"));
  params.memory.fixed_bytes = -1;
  EXPECT_THAT(CostModel::Create(model, cluster, params).status().message(),
              HasSubstr("memory.fixed_bytes = -1; it must be a finite "
                        "number >= 0"));
}

}  // namespace
}  // namespace dcp
