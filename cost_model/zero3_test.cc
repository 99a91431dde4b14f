// ZeRO-3 (FSDP2-style parameter and gradient sharding) in the cost model:
// the static bytes it leaves per GPU and the collectives each micro-batch
// pays for it.
#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/memory_model.h"
#include "cost_model/model_spec.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

CostModel ModelWith(const ModelSpec& model, const ClusterSpec& cluster,
                    ParameterSharding sharding) {
  CostParams params = DefaultCostParams(model, cluster);
  SetTrainingStateBytes(TrainingPrecision::kBf16, sharding, params.memory);
  absl::StatusOr<CostModel> cost = CostModel::Create(model, cluster, params);
  EXPECT_TRUE(cost.ok()) << cost.status();
  return *std::move(cost);
}

MicroBatchShape Shape(int64_t length, int sp_size) {
  MicroBatchShape shape;
  shape.sp_size = sp_size;
  shape.AddSequence(length);
  return shape;
}

// llama3-70b's ~70.6e9 parameters need 18 B each: ~1.27 TB. Replicated (and
// with ZeRO-1, whose weights and gradients alone are 6 B x 70.6e9 = 424 GB)
// that exceeds an H200's 112.8 GB budget at any GPU count; ZeRO-3 over 32
// GPUs leaves ~40 GB of shards plus two gathered units.
TEST(Zero3Test, Llama70bStateFitsAnH200OnlyWithZeroThree) {
  const ModelSpec model = ModelPreset("llama3-70b").value();
  const ClusterSpec cluster = H200Cluster(4, 8);
  const CostModel replicated =
      ModelWith(model, cluster, ParameterSharding::kReplicated);
  const CostModel zero1 = ModelWith(model, cluster, ParameterSharding::kZero1);
  const CostModel zero3 = ModelWith(model, cluster, ParameterSharding::kZero3);
  const double budget = zero3.MemoryBudgetBytes();
  EXPECT_GT(replicated.memory().StaticBytes(), budget);
  EXPECT_GT(zero1.memory().StaticBytes(), budget);
  EXPECT_LT(zero3.memory().StaticBytes(), budget);
  // (weights + gradients + optimizer) / 32 + the working set + communicators.
  const double parameters = static_cast<double>(model.ParameterCount());
  const MemoryParams& memory = zero3.params().memory;
  EXPECT_DOUBLE_EQ(zero3.memory().StaticBytes(),
                   parameters * 18 / 32 +
                       2.0 * MemoryModel::LargestShardingUnit(model) * 6 +
                       memory.communicator_bytes *
                           memory.communicators_per_rank);
  // And it leaves room for activations: a 32K-token sequence fits SP=8.
  EXPECT_TRUE(zero3.MinCheckpointedLayers(Shape(32768, 8)).has_value());
}

// Every micro-batch pays one all-gather of the weights in its forward, one
// in its backward and a reduce-scatter of the gradients, per unit (80
// layers, the embedding, the head), over the whole world; recompute adds
// none (the backward's gather serves it) and the step-end all-reduce goes.
TEST(Zero3Test, EachMicroBatchGathersTwiceAndReduceScattersOnce) {
  const ModelSpec model = ModelPreset("llama3-70b").value();
  const ClusterSpec cluster = H200Cluster(4, 8);
  const CostModel zero1 = ModelWith(model, cluster, ParameterSharding::kZero1);
  const CostModel zero3 = ModelWith(model, cluster, ParameterSharding::kZero3);
  const CommModel& comm = zero3.comm();
  const double layer = static_cast<double>(model.ParametersPerLayer());
  const double table = static_cast<double>(model.vocab_size * model.hidden_size);
  const double head = table + static_cast<double>(model.hidden_size);
  auto per_unit = [&](double bytes_per_parameter, bool gather) {
    auto one = [&](double parameters) {
      const double bytes = parameters * bytes_per_parameter;
      return gather ? comm.AllGatherSeconds(bytes, 32, /*inter_node=*/true)
                    : comm.ReduceScatterSeconds(bytes, 32, true);
    };
    return model.num_layers * one(layer) + one(table) + one(head);
  };
  const double gather = per_unit(2, /*gather=*/true);
  const double reduce = per_unit(4, /*gather=*/false);
  EXPECT_DOUBLE_EQ(zero3.ParameterAllGatherSeconds(), gather);
  EXPECT_DOUBLE_EQ(zero3.GradientReduceScatterSeconds(), reduce);
  EXPECT_GT(gather, 0);
  EXPECT_EQ(zero1.ParameterAllGatherSeconds(), 0);
  EXPECT_EQ(zero1.GradientReduceScatterSeconds(), 0);

  for (int k : {0, 40, 80}) {
    const MicroBatchShape shape = Shape(16384, 8);
    const MicroBatchCost with = zero3.MicroBatch(shape, k);
    const MicroBatchCost without = zero1.MicroBatch(shape, k);
    EXPECT_DOUBLE_EQ(with.forward_seconds, without.forward_seconds + gather);
    EXPECT_DOUBLE_EQ(with.backward_seconds,
                     without.backward_seconds + gather + reduce);
    EXPECT_DOUBLE_EQ(with.recompute_seconds, without.recompute_seconds);
    EXPECT_DOUBLE_EQ(with.sharding_seconds, 2 * gather + reduce);
    EXPECT_DOUBLE_EQ(with.sharding_seconds, zero3.ShardingMicroBatchSeconds());
    EXPECT_DOUBLE_EQ(with.communication_seconds,
                     without.communication_seconds);
    EXPECT_EQ(without.sharding_seconds, 0);
  }
  EXPECT_GT(zero1.GradientAllReduceSeconds(), 0);
  EXPECT_EQ(zero3.GradientAllReduceSeconds(), 0);
}

// The same tokens cut into m micro-batches pay the sharding collectives m
// times: their total grows linearly in m, so fewer, larger micro-batches
// are cheaper under ZeRO-3 than under ZeRO-1.
TEST(Zero3Test, ShardingCostGrowsLinearlyWithMicroBatches) {
  const ModelSpec model = ModelPreset("llama3-70b").value();
  const ClusterSpec cluster = H200Cluster(4, 8);
  const CostModel zero1 = ModelWith(model, cluster, ParameterSharding::kZero1);
  const CostModel zero3 = ModelWith(model, cluster, ParameterSharding::kZero3);
  const double per_micro_batch = zero3.ShardingMicroBatchSeconds();
  ASSERT_GT(per_micro_batch, 0);
  constexpr int kSequences = 8;
  for (int m : {1, 2, 4, 8}) {
    double sharding = 0;
    double extra = 0;
    for (int b = 0; b < m; ++b) {
      MicroBatchShape shape;
      shape.sp_size = 8;
      for (int s = 0; s < kSequences / m; ++s) shape.AddSequence(4096);
      sharding += zero3.MicroBatch(shape, 0).sharding_seconds;
      extra += zero3.MicroBatch(shape, 0).total_seconds -
               zero1.MicroBatch(shape, 0).total_seconds;
    }
    EXPECT_NEAR(sharding, m * per_micro_batch, 1e-9 * m * per_micro_batch);
    EXPECT_NEAR(extra, m * per_micro_batch, 1e-9 * m * per_micro_batch);
  }
}

// Inside one node the collectives run on NVLink; past it on the NICs.
TEST(Zero3Test, CollectivesUseTheNicsOnceTheWorldSpansNodes) {
  const ModelSpec model = ModelPreset("llama3-8b").value();
  const ClusterSpec one_node = H200Cluster(1, 8);
  const CostModel intra =
      ModelWith(model, one_node, ParameterSharding::kZero3);
  const double bytes = static_cast<double>(model.ParametersPerLayer()) * 2;
  EXPECT_DOUBLE_EQ(
      intra.ParameterAllGatherSeconds(),
      model.num_layers * intra.comm().AllGatherSeconds(bytes, 8, false) +
          intra.comm().AllGatherSeconds(
              static_cast<double>(model.vocab_size * model.hidden_size) * 2,
              8, false) +
          intra.comm().AllGatherSeconds(
              static_cast<double>(model.vocab_size * model.hidden_size +
                                  model.hidden_size) *
                  2,
              8, false));
  const CostModel inter =
      ModelWith(model, H200Cluster(2, 8), ParameterSharding::kZero3);
  EXPECT_GT(inter.ParameterAllGatherSeconds(),
            intra.ParameterAllGatherSeconds());
  // A single GPU has nothing to gather.
  EXPECT_EQ(ModelWith(model, H200Cluster(1, 1), ParameterSharding::kZero3)
                .ShardingMicroBatchSeconds(),
            0);
}

}  // namespace
}  // namespace dcp
