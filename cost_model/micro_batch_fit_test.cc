#include "cost_model/micro_batch_fit.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

// A small model on a slow "CPU" cluster with known fixed costs: what the
// fit must recover from the samples this truth produces.
struct Truth {
  ModelSpec model;
  ClusterSpec cluster;
  CostParams params;

  CostModel Model() const { return *CostModel::Create(model, cluster, params); }
  // FitCostModel of `samples` from the public-figure defaults.
  absl::StatusOr<CostModelFit> FitFromDefaults(
      absl::Span<const ProfileSample> samples) const {
    return FitCostModel(model, cluster, DefaultCostParams(model, cluster),
                        samples);
  }
};

Truth MakeTruth() {
  Truth truth;
  truth.model = *ModelPreset("tiny");
  truth.cluster = H200Cluster(/*num_nodes=*/1, /*gpus_per_node=*/2);
  truth.params = DefaultCostParams(truth.model, truth.cluster);
  ComputeParams& compute = truth.params.compute;
  compute.gemm_flops_per_second = 20e9;
  compute.gemm_half_efficiency_tokens = 32;
  compute.attention_forward_flops_per_second = 5e9;
  compute.attention_forward_half_length_tokens = 64;
  compute.attention_backward_flops_per_second = 3e9;
  compute.attention_backward_half_length_tokens = 64;
  // The element-wise rate is not told apart from the op rates' scale by
  // whole micro-batches: kept at the default the fit starts from.
  compute.micro_batch_fixed_seconds = 2.5e-3;
  compute.layer_fixed_seconds = 300e-6;
  compute.sequence_layer_fixed_seconds = 40e-6;
  compute.optimizer_step_seconds = 1.5e-3;
  return truth;
}

const ModelFitReport& ReportNamed(const CostModelFit& fit,
                                  const std::string& name) {
  for (const ModelFitReport& report : fit.reports) {
    if (report.name == name) return report;
  }
  ADD_FAILURE() << "no report " << name;
  static const ModelFitReport* const none = new ModelFitReport;
  return *none;
}

// The whole micro-batches of `model`'s synthetic profile.
std::vector<ProfileSample> MicroBatchSamples(const CostModel& model,
                                             uint64_t seed,
                                             double relative_noise) {
  std::vector<ProfileSample> samples;
  for (const ProfileSample& s : SyntheticProfile(model, seed, relative_noise)) {
    if (s.op == ProfileSample::Op::kMicroBatch) samples.push_back(s);
  }
  return samples;
}

// The fitted micro-batch, layer-pass and per-sequence fixed terms within
// those fractions of the truth's.
void ExpectFixedTermsNear(const ComputeParams& got, const ComputeParams& want,
                          double micro_batch_tolerance, double layer_tolerance,
                          double sequence_tolerance) {
  EXPECT_NEAR(got.micro_batch_fixed_seconds, want.micro_batch_fixed_seconds,
              micro_batch_tolerance * want.micro_batch_fixed_seconds);
  EXPECT_NEAR(got.layer_fixed_seconds, want.layer_fixed_seconds,
              layer_tolerance * want.layer_fixed_seconds);
  EXPECT_NEAR(got.sequence_layer_fixed_seconds,
              want.sequence_layer_fixed_seconds,
              sequence_tolerance * want.sequence_layer_fixed_seconds);
}

TEST(MicroBatchFitTest, RecoversTheFixedTermsFromExactSamples) {
  const Truth truth = MakeTruth();
  absl::StatusOr<CostModelFit> fit = truth.FitFromDefaults(
      SyntheticProfile(truth.Model(), /*seed=*/1, /*relative_noise=*/0));
  ASSERT_TRUE(fit.ok()) << fit.status();
  const ModelFitReport& report = ReportNamed(*fit, "micro_batch");
  EXPECT_FALSE(report.used_defaults) << report.note;
  const ComputeParams& want = truth.params.compute;
  const ComputeParams& got = fit->params.compute;
  ExpectFixedTermsNear(got, want, /*micro_batch_tolerance=*/1e-6,
                       /*layer_tolerance=*/1e-6, /*sequence_tolerance=*/1e-6);
  EXPECT_NEAR(got.gemm_flops_per_second, want.gemm_flops_per_second,
              1e-6 * want.gemm_flops_per_second);
  EXPECT_NEAR(got.optimizer_step_seconds, want.optimizer_step_seconds, 1e-9);
  EXPECT_FALSE(ReportNamed(*fit, "optimizer_step").used_defaults);
  EXPECT_LT(report.rms_relative_error, 1e-9);
  EXPECT_GT(report.held_out_samples, 0);
  EXPECT_LT(report.held_out_rms_relative_error, 1e-9);
}

TEST(MicroBatchFitTest, NoisySamplesGiveTermsWithinTheNoiseAndAHeldOutError) {
  const Truth truth = MakeTruth();
  const CostModel model = truth.Model();
  absl::StatusOr<CostModelFit> fit = truth.FitFromDefaults(
      SyntheticProfile(model, /*seed=*/7, /*relative_noise=*/0.02));
  ASSERT_TRUE(fit.ok()) << fit.status();
  const ModelFitReport& report = ReportNamed(*fit, "micro_batch");
  ASSERT_FALSE(report.used_defaults) << report.note;
  const ComputeParams& want = truth.params.compute;
  const ComputeParams& got = fit->params.compute;
  // The layer pass's term changes only with recompute: the loosest.
  ExpectFixedTermsNear(got, want, /*micro_batch_tolerance=*/0.25,
                       /*layer_tolerance=*/0.5, /*sequence_tolerance=*/0.25);
  // The held-out error is that of a prediction, so at least the fit's own.
  EXPECT_GT(report.held_out_samples, 0);
  EXPECT_GE(report.held_out_rms_relative_error, report.rms_relative_error);
  EXPECT_LT(report.held_out_rms_relative_error, 0.05);
  // Whole micro-batches priced with the fitted parameters are within the
  // noise of the truth.
  const CostModel fitted =
      *CostModel::Create(truth.model, truth.cluster, fit->params);
  for (int sequences : {1, 3, 12}) {
    const std::vector<int64_t> lengths(sequences, 200);
    const MicroBatchShape shape = ShapeOf(lengths, /*sp_size=*/1);
    const double expected = model.MicroBatch(shape, 1).total_seconds;
    EXPECT_NEAR(fitted.MicroBatch(shape, 1).total_seconds, expected,
                0.05 * expected)
        << sequences << " sequences";
  }
}

TEST(MicroBatchFitTest, AttentionOffTheOpCurveGetsItsOwnScale) {
  // The whole micro-batches' attention costs three times the op samples'
  // quadratic term (on a CPU, long sequences' score matrices leave the
  // caches); its linear term and everything else are as the op fit says.
  const Truth truth = MakeTruth();
  CostParams slow_attention = truth.params;
  ComputeParams& slow = slow_attention.compute;
  slow.attention_forward_flops_per_second /= 3;
  slow.attention_backward_flops_per_second /= 3;
  slow.attention_forward_half_length_tokens /= 3;
  slow.attention_backward_half_length_tokens /= 3;
  const CostModel runs =
      *CostModel::Create(truth.model, truth.cluster, slow_attention);
  const std::vector<ProfileSample> samples =
      MicroBatchSamples(runs, /*seed=*/5, /*relative_noise=*/0);
  ComputeParams compute = truth.params.compute;
  const ModelFitReport report = FitMicroBatches(truth.model, samples, compute);
  ASSERT_FALSE(report.used_defaults) << report.note;
  EXPECT_NE(report.note.find("attention rate x 1/"), std::string::npos)
      << report.note;
  EXPECT_LT(report.rms_relative_error, 1e-6);
  EXPECT_NEAR(compute.attention_forward_flops_per_second,
              slow.attention_forward_flops_per_second,
              1e-6 * slow.attention_forward_flops_per_second);
  CostParams fitted_params = truth.params;
  fitted_params.compute = compute;
  const CostModel fitted =
      *CostModel::Create(truth.model, truth.cluster, fitted_params);
  // A sequence longer than any sample is priced as the runs take it.
  const MicroBatchShape long_sequence = ShapeOf({2048}, /*sp_size=*/1);
  const double want = runs.MicroBatch(long_sequence, 1).total_seconds;
  EXPECT_NEAR(fitted.MicroBatch(long_sequence, 1).total_seconds, want,
              1e-6 * want);
}

TEST(MicroBatchFitTest, OneScaleWhereTheAttentionsOwnDoesNotPredictBetter) {
  // Samples of the op fit's own curve, with noise: a scale more would only
  // fit the noise, so the attention keeps the op fit's rates.
  const Truth truth = MakeTruth();
  const std::vector<ProfileSample> samples =
      MicroBatchSamples(truth.Model(), /*seed=*/11, /*relative_noise=*/0.03);
  ComputeParams compute = truth.params.compute;
  const ModelFitReport report = FitMicroBatches(truth.model, samples, compute);
  ASSERT_FALSE(report.used_defaults) << report.note;
  EXPECT_EQ(report.note.find("attention rate"), std::string::npos)
      << report.note;
  EXPECT_DOUBLE_EQ(compute.attention_forward_half_length_tokens,
                   truth.params.compute.attention_forward_half_length_tokens);
}

TEST(MicroBatchFitTest, ANegativeFixedTermIsHeldAtZero) {
  Truth truth = MakeTruth();
  truth.params.compute.sequence_layer_fixed_seconds = 0;
  std::vector<ProfileSample> samples =
      MicroBatchSamples(truth.Model(), /*seed=*/3, /*relative_noise=*/0);
  for (ProfileSample& s : samples) {
    // Fewer seconds the more sequences: a negative per-sequence term.
    s.measured_seconds -= 1e-6 * s.num_sequences;
  }
  ComputeParams compute = truth.params.compute;
  const ModelFitReport report = FitMicroBatches(truth.model, samples, compute);
  ASSERT_FALSE(report.used_defaults) << report.note;
  EXPECT_EQ(compute.sequence_layer_fixed_seconds, 0);
  EXPECT_NE(report.note.find("held at 0: sequence_layer_fixed_seconds"),
            std::string::npos)
      << report.note;
}

TEST(MicroBatchFitTest, OneRecomputeSettingKeepsTheDefaults) {
  const Truth truth = MakeTruth();
  std::vector<ProfileSample> samples;
  for (const ProfileSample& s :
       MicroBatchSamples(truth.Model(), /*seed=*/3, /*relative_noise=*/0)) {
    if (s.checkpointed_layers == 0) samples.push_back(s);
  }
  ComputeParams compute = DefaultComputeParams(truth.model, truth.cluster);
  const double before = compute.micro_batch_fixed_seconds;
  const ModelFitReport report = FitMicroBatches(truth.model, samples, compute);
  EXPECT_TRUE(report.used_defaults);
  EXPECT_NE(report.note.find("checkpointed-layer"), std::string::npos)
      << report.note;
  EXPECT_EQ(compute.micro_batch_fixed_seconds, before);
}

TEST(MicroBatchFitTest, MicroBatchSamplesAreValidated) {
  const Truth truth = MakeTruth();
  ProfileSample bad;
  bad.op = ProfileSample::Op::kMicroBatch;
  bad.tokens = 64;
  bad.sum_lengths = 64;
  bad.sum_squared_lengths = 64 * 64;
  bad.num_sequences = 0;
  bad.measured_seconds = 1e-3;
  absl::StatusOr<CostModelFit> fit =
      FitCostModel(truth.model, truth.cluster, truth.params, {bad});
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(std::string(fit.status().message()).find("num_sequences"),
            std::string::npos)
      << fit.status();
}

}  // namespace
}  // namespace dcp
