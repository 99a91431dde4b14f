// Memory measured, not assumed: the worker's model (GPT and DiT) runs
// micro-batches on the CPU at several lengths and recompute settings, the
// memory model is fitted to the measured peaks, and the fitted model
// predicts the activation bytes of lengths it never saw.

#include "worker/execution/memory_profiler.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "cost_model/memory_model.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/torch.h"
#include "worker/execution/cpu_allocation_meter.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

// How far the fitted model may miss a held-out length's measured
// activation bytes (relative).
constexpr double kHeldOutTolerance = 0.05;

const ModelFitReport* Report(const CostModelFit& fit, const std::string& name) {
  for (const ModelFitReport& report : fit.reports) {
    if (report.name == name) return &report;
  }
  return nullptr;
}

class MeasuredActivationMemoryTest
    : public ::testing::TestWithParam<std::string> {};

TEST_P(MeasuredActivationMemoryTest, PerTokenBytesAgreeWithTheFittedModel) {
  absl::StatusOr<ModelSpec> model = ModelPreset(GetParam());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->num_layers, 2);
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/1, /*gpus_per_node=*/1);
  CostParams defaults = DefaultCostParams(*model, cluster);
  SetTrainingStateBytes(TrainingPrecision::kFp32, /*zero1=*/false,
                        defaults.memory);
  // A CPU worker: Gloo communicators hold no GPU memory.
  SetCommunicatorMemory(CommunicatorBackend::kGloo, /*max_cached_groups=*/0,
                        defaults.memory);
  const double static_bytes =
      MemoryModel(*model, defaults.memory, cluster.NumGpus()).StaticBytes();

  ActivationMemoryOptions options;
  options.sequence_tokens = 256;
  options.checkpointed_layers = {0, 1, 2};
  options.static_bytes = static_bytes;
  options.tokens = {512, 1024, 2048};
  absl::StatusOr<std::vector<ProfileSample>> fitted_on =
      ProfileActivationMemory(*model, options);
  ASSERT_TRUE(fitted_on.ok()) << fitted_on.status();
  ASSERT_EQ(fitted_on->size(), 9u);
  options.tokens = {768, 3072};
  absl::StatusOr<std::vector<ProfileSample>> held_out =
      ProfileActivationMemory(*model, options);
  ASSERT_TRUE(held_out.ok()) << held_out.status();
  ASSERT_EQ(held_out->size(), 6u);
  // The meter was installed only for the measurements.
  EXPECT_FALSE(CpuAllocationMeter::Get().installed());

  absl::StatusOr<CostModelFit> fit =
      FitCostModel(*model, cluster, defaults, *fitted_on);
  ASSERT_TRUE(fit.ok()) << fit.status();
  const ModelFitReport* report = Report(*fit, "activation_memory");
  ASSERT_NE(report, nullptr);
  EXPECT_FALSE(report->used_defaults) << report->note;
  const MemoryModel fitted(*model, fit->params.memory, cluster.NumGpus());
  const MemoryModel assumed(*model, defaults.memory, cluster.NumGpus());
  std::printf(
      "%s: fitted to %d samples (rms %.2f%%, max %.2f%%): activation %.0f, "
      "checkpoint %.0f bytes per token per layer, fixed %.0f bytes "
      "(defaults: %.0f, %.0f, %.0f)\n",
      model->name.c_str(), report->num_samples,
      100 * report->rms_relative_error, 100 * report->max_relative_error,
      fit->params.memory.activation_bytes_per_token_per_layer,
      fit->params.memory.checkpoint_bytes_per_token_per_layer,
      fit->params.memory.fixed_bytes,
      defaults.memory.activation_bytes_per_token_per_layer,
      defaults.memory.checkpoint_bytes_per_token_per_layer,
      defaults.memory.fixed_bytes);
  for (const ProfileSample& sample : *held_out) {
    const int64_t tokens = static_cast<int64_t>(sample.tokens);
    const int k = sample.checkpointed_layers;
    const double measured = sample.measured_bytes - static_bytes;
    const double predicted =
        fitted.PeakBytes(tokens, k, /*sp_size=*/1) - static_bytes;
    const double default_prediction =
        assumed.PeakBytes(tokens, k, 1) - static_bytes;
    std::printf(
        "  %5lld tokens, %d checkpointed: measured %.1f bytes/token, fitted "
        "%.1f (%+.2f%%), defaults %.1f\n",
        static_cast<long long>(tokens), k, measured / tokens,
        predicted / tokens, 100 * (predicted / measured - 1),
        default_prediction / tokens);
    EXPECT_GT(measured, 0);
    EXPECT_NEAR(predicted / measured, 1.0, kHeldOutTolerance)
        << tokens << " tokens, " << k << " checkpointed layers";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MeasuredActivationMemoryTest,
                         ::testing::Values("tiny", "tiny-dit"));

TEST(ActivationMemoryTest, MoreTokensAndLessRecomputeHoldMore) {
  const ModelSpec model = *ModelPreset("tiny");
  ActivationMemoryOptions options;
  options.sequence_tokens = 128;
  options.tokens = {256, 512};
  options.checkpointed_layers = {0, 2};
  options.static_bytes = 1000;
  absl::StatusOr<std::vector<ProfileSample>> samples =
      ProfileActivationMemory(model, options);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 4u);
  // In order: k = 0 at 256 and 512 tokens, then k = 2.
  for (const ProfileSample& sample : *samples) {
    EXPECT_EQ(sample.op, ProfileSample::Op::kActivationMemory);
    EXPECT_GT(sample.measured_bytes, 1000);
  }
  EXPECT_EQ((*samples)[1].tokens, 512);
  EXPECT_EQ((*samples)[2].checkpointed_layers, 2);
  EXPECT_GT((*samples)[1].measured_bytes, (*samples)[0].measured_bytes);
  EXPECT_GT((*samples)[0].measured_bytes, (*samples)[2].measured_bytes);
  EXPECT_GT((*samples)[1].measured_bytes, (*samples)[3].measured_bytes);
}

TEST(ActivationMemoryTest, InvalidOptionsNameTheField) {
  const ModelSpec model = *ModelPreset("tiny");
  ActivationMemoryOptions options;
  options.tokens = {1000};
  EXPECT_THAT(ProfileActivationMemory(model, options).status().message(),
              HasSubstr("memory_sequence_tokens"));
  options = ActivationMemoryOptions();
  options.checkpointed_layers = {3};
  EXPECT_THAT(ProfileActivationMemory(model, options).status().message(),
              HasSubstr("memory_checkpointed_layers 3"));
  options = ActivationMemoryOptions();
  options.static_bytes = -1;
  EXPECT_EQ(ProfileActivationMemory(model, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
