#include "cost_model/sp_micro_batch_fit.h"

#include <cmath>
#include <iostream>
#include <random>
#include <vector>

#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "cost_model/micro_batch_shape.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

// The CPU job's shape: a tiny model on two one-rank "nodes", so SP 2 spans
// nodes, with the all-to-alls dearer inside a micro-batch than alone and a
// few hundred us of layout work per layer pass.
struct SpCase {
  ModelSpec model = *ModelPreset("tiny");
  ClusterSpec cluster = H200Cluster(/*num_nodes=*/2, /*gpus_per_node=*/1);
  CostParams profiled;  // What the op-level profile fitted.
  CostParams truth;     // What the micro-batches really pay.
};

SpCase MakeCase() {
  SpCase setup;
  setup.profiled = DefaultCostParams(setup.model, setup.cluster);
  ComputeParams& compute = setup.profiled.compute;
  // What the main job's profile fits on a 2-core CPU.
  compute.gemm_flops_per_second = 65e9;
  compute.gemm_half_efficiency_tokens = 13;
  compute.attention_forward_flops_per_second = 75e9;
  compute.attention_forward_half_length_tokens = 900;
  compute.attention_backward_flops_per_second = 90e9;
  compute.attention_backward_half_length_tokens = 1100;
  compute.elementwise_bytes_per_second = 7.5e9;
  compute.micro_batch_fixed_seconds = 800e-6;
  compute.sequence_layer_fixed_seconds = 25e-6;
  setup.profiled.comm.all_to_all_inter_latency_seconds = 150e-6;
  setup.profiled.comm.all_to_all_inter_bus_bytes_per_second = 700e6;
  setup.truth = setup.profiled;
  setup.truth.comm.all_to_all_inter_latency_seconds = 480e-6;
  setup.truth.comm.all_to_all_inter_bus_bytes_per_second = 450e6;
  setup.truth.compute.ulysses_layer_fixed_seconds = 350e-6;
  return setup;
}

// Micro-batches over SP 2 as the worker profiles them, timed under `truth`
// with relative noise on each part.
std::vector<ProfileSample> Samples(const SpCase& setup, double noise,
                                   uint64_t seed) {
  const CostModel truth =
      *CostModel::Create(setup.model, setup.cluster, setup.truth);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<ProfileSample> samples;
  for (int k : {0, setup.model.num_layers}) {
    for (const auto& [sequences, length] : std::vector<std::pair<int, int64_t>>{
             {1, 32}, {1, 256}, {4, 64}, {16, 48}, {1, 1024}, {2, 512}}) {
      const MicroBatchShape shape =
          ShapeOf(std::vector<int64_t>(sequences, length), /*sp_size=*/2);
      const MicroBatchCost cost = truth.MicroBatch(shape, k);
      const double communication =
          cost.communication_seconds * (1 + noise * normal(rng));
      const double outside = (cost.total_seconds - cost.communication_seconds) *
                             (1 + noise * normal(rng));
      samples.push_back(SpMicroBatchSample(shape, /*inter_node=*/true, k,
                                           outside + communication,
                                           communication));
    }
  }
  return samples;
}

TEST(SpMicroBatchFitTest, RecoversLatencyAndLayoutCostFromExactSamples) {
  const SpCase setup = MakeCase();
  CostParams params = setup.profiled;
  const ModelFitReport report = FitSpMicroBatches(setup.model, setup.cluster,
                                                  Samples(setup, 0, 1), params);
  EXPECT_FALSE(report.used_defaults) << report.note;
  EXPECT_EQ(report.name, "sp_micro_batch");
  EXPECT_NEAR(params.comm.all_to_all_inter_latency_seconds, 480e-6, 1e-9);
  EXPECT_NEAR(params.compute.ulysses_layer_fixed_seconds, 350e-6, 1e-9);
  // Nothing else moves; no intra-node samples, so that latency stays.
  EXPECT_EQ(params.comm.all_to_all_intra_latency_seconds,
            setup.profiled.comm.all_to_all_intra_latency_seconds);
  EXPECT_NEAR(params.comm.all_to_all_inter_bus_bytes_per_second / 450e6, 1,
              1e-9);
  EXPECT_EQ(params.compute.micro_batch_fixed_seconds,
            setup.profiled.compute.micro_batch_fixed_seconds);
  EXPECT_LT(report.max_relative_error, 1e-9);
  EXPECT_EQ(report.held_out_samples, report.num_samples);
  EXPECT_LT(report.held_out_rms_relative_error, 1e-9);
}

TEST(SpMicroBatchFitTest, RecoversThemFromNoisySamplesAndPredictsHeldOut) {
  const SpCase setup = MakeCase();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    CostParams params = setup.profiled;
    const ModelFitReport report = FitSpMicroBatches(
        setup.model, setup.cluster, Samples(setup, 0.03, seed), params);
    EXPECT_NEAR(params.comm.all_to_all_inter_latency_seconds / 480e-6, 1, 0.05)
        << seed;
    // The tiny model's exchanges are mostly latency: the bandwidth is known
    // loosely, the micro-batches' times well.
    EXPECT_NEAR(params.comm.all_to_all_inter_bus_bytes_per_second / 450e6, 1,
                0.5)
        << seed;
    EXPECT_NEAR(params.compute.ulysses_layer_fixed_seconds / 350e-6, 1, 0.10)
        << seed;
    EXPECT_LT(report.rms_relative_error, 0.04) << seed;
    EXPECT_LT(report.held_out_rms_relative_error, 0.05) << seed;
    // A micro-batch of a shape not profiled (what a planned one looks like).
    const CostModel fitted =
        *CostModel::Create(setup.model, setup.cluster, params);
    const CostModel truth =
        *CostModel::Create(setup.model, setup.cluster, setup.truth);
    const MicroBatchShape planned =
        ShapeOf(std::vector<int64_t>{700, 300, 120, 90, 40, 16}, 2);
    EXPECT_NEAR(fitted.MicroBatch(planned, 1).total_seconds /
                    truth.MicroBatch(planned, 1).total_seconds,
                1, 0.05)
        << seed;
  }
}

TEST(SpMicroBatchFitTest, WithoutTheCorrectionsTheProfiledModelMissesThem) {
  // The reason for the fit: the op-level model under-predicts these
  // micro-batches by far more than their noise.
  const SpCase setup = MakeCase();
  const CostModel profiled =
      *CostModel::Create(setup.model, setup.cluster, setup.profiled);
  for (const ProfileSample& s : Samples(setup, 0, 1)) {
    EXPECT_LT(
        profiled.MicroBatch(ShapeOfMicroBatchSample(s), s.checkpointed_layers)
            .total_seconds,
        0.9 * s.measured_seconds);
  }
}

TEST(SpMicroBatchFitTest, TooFewSamplesKeepTheParams) {
  const SpCase setup = MakeCase();
  CostParams params = setup.profiled;
  std::vector<ProfileSample> one = Samples(setup, 0, 1);
  one.resize(1);
  const ModelFitReport report =
      FitSpMicroBatches(setup.model, setup.cluster, one, params);
  EXPECT_TRUE(report.used_defaults);
  EXPECT_NE(report.note.find("need at least 2"), std::string::npos)
      << report.note;
  EXPECT_EQ(params.comm.all_to_all_inter_latency_seconds,
            setup.profiled.comm.all_to_all_inter_latency_seconds);
  EXPECT_EQ(params.compute.ulysses_layer_fixed_seconds, 0);
}

TEST(SpMicroBatchFitTest, FasterThanPredictedHoldsTheCostsAtZero) {
  // Micro-batches cheaper than the op-level model: no negative costs.
  SpCase setup = MakeCase();
  setup.truth = setup.profiled;
  setup.truth.comm.all_to_all_inter_latency_seconds = 0;
  setup.truth.compute.gemm_flops_per_second *= 2;
  CostParams params = setup.profiled;
  FitSpMicroBatches(setup.model, setup.cluster, Samples(setup, 0, 1), params);
  EXPECT_GE(params.comm.all_to_all_inter_latency_seconds, 0);
  EXPECT_LT(params.comm.all_to_all_inter_latency_seconds, 1e-9);
  EXPECT_EQ(params.compute.ulysses_layer_fixed_seconds, 0);
}

TEST(SpMicroBatchFitTest, FitCostModelRejectsInconsistentSamples) {
  const SpCase setup = MakeCase();
  std::vector<ProfileSample> samples = Samples(setup, 0, 1);
  samples[3].communication_seconds = samples[3].measured_seconds * 1.5;
  absl::StatusOr<CostModelFit> fit =
      FitCostModel(setup.model, setup.cluster, setup.profiled, samples);
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.status().message().find("profile sample 3"), std::string::npos)
      << fit.status();
  EXPECT_NE(fit.status().message().find("communication_seconds"),
            std::string::npos)
      << fit.status();
  samples = Samples(setup, 0, 1);
  samples[0].group_size = 1;
  fit = FitCostModel(setup.model, setup.cluster, setup.profiled, samples);
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.status().message().find("group_size"), std::string::npos)
      << fit.status();
}

TEST(SpMicroBatchFitTest, LayoutCostCountsAsComputeOnlyAtSpTwoOrMore) {
  const SpCase setup = MakeCase();
  const CostModel without =
      *CostModel::Create(setup.model, setup.cluster, setup.profiled);
  CostParams with_params = setup.profiled;
  with_params.compute.ulysses_layer_fixed_seconds = 350e-6;
  const CostModel with =
      *CostModel::Create(setup.model, setup.cluster, with_params);
  const std::vector<int64_t> lengths = {100, 60};
  const int k = 1;
  const double passes = 2 * setup.model.num_layers + k;
  const MicroBatchCost sp2_without = without.MicroBatch(ShapeOf(lengths, 2), k);
  const MicroBatchCost sp2_with = with.MicroBatch(ShapeOf(lengths, 2), k);
  EXPECT_NEAR(sp2_with.total_seconds - sp2_without.total_seconds,
              passes * 350e-6, 1e-12);
  EXPECT_EQ(sp2_with.communication_seconds, sp2_without.communication_seconds);
  EXPECT_NEAR(sp2_with.recompute_seconds - sp2_without.recompute_seconds,
              k * 350e-6, 1e-12);
  EXPECT_EQ(with.MicroBatch(ShapeOf(lengths, 1), k).total_seconds,
            without.MicroBatch(ShapeOf(lengths, 1), k).total_seconds);
}

}  // namespace
}  // namespace dcp
