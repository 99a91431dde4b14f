#include "planner/service/cost_params_registry.h"

#include <memory>

#include "cost_model/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/client/proto_convert.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<CostParamsRegistry> MakeRegistry() {
  const ModelSpec model = ModelPreset("tiny").value();
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/2, /*gpus_per_node=*/1);
  return std::make_unique<CostParamsRegistry>(
      model, cluster,
      std::make_shared<const CostModel>(
          CostModel::CreateDefault(model, cluster).value()),
      /*store=*/nullptr);
}

// A registry of the tiny model on 2 x 1 GPUs, with no store.
class CostParamsRegistryTest : public ::testing::Test {
 protected:
  // The parameters of the current version.
  CostParams CurrentParams() const {
    return registry->Snapshot()->current->cost_model->params();
  }
  // The parameters of the current fit.
  CostParams FittedParams() const {
    return registry->Snapshot()->fitted_params;
  }

  const std::unique_ptr<CostParamsRegistry> registry = MakeRegistry();
};

TEST_F(CostParamsRegistryTest, SnapshotsAreImmutable) {
  std::shared_ptr<const CostParamsSnapshot> before = registry->Snapshot();
  EXPECT_EQ(before->current->version, 0);
  EXPECT_EQ(before->refit_epoch, 0);
  ASSERT_EQ(registry->ApplyRefit(/*epoch=*/0, /*factor=*/2, 0.05).value(), 1);
  // The old snapshot still says what it said.
  EXPECT_EQ(before->current->version, 0);
  EXPECT_EQ(before->current->compute_correction, 1);
  std::shared_ptr<const CostParamsSnapshot> after = registry->Snapshot();
  EXPECT_EQ(after->current->version, 1);
  EXPECT_EQ(after->current->compute_correction, 2);
  EXPECT_EQ(registry->Version(0)->cost_model, before->current->cost_model);
  EXPECT_EQ(registry->Version(2), nullptr);
  // Twice the compute time: half the GEMM rate.
  EXPECT_DOUBLE_EQ(
      after->current->cost_model->params().compute.gemm_flops_per_second,
      before->fitted_params.compute.gemm_flops_per_second / 2);
}

TEST_F(CostParamsRegistryTest, RefitNeedsAChangeAndTheCurrentEpoch) {
  EXPECT_FALSE(registry->ApplyRefit(0, 1.04, 0.05).value().has_value());
  EXPECT_FALSE(registry->ApplyRefit(/*epoch=*/3, 2, 0.05).value().has_value());
  EXPECT_EQ(registry->ApplyRefit(0, 1.5, 0.05).value(), 1);
  EXPECT_FALSE(registry->ApplyRefit(0, 1.52, 0.05).value().has_value());
}

TEST_F(CostParamsRegistryTest, RefitScalesTheComputeAtSpTwoAndAboveApart) {
  const double fitted_scale = FittedParams().compute.sp_compute_scale;
  // The factor alone moves nothing; the SP scale alone makes a version.
  EXPECT_FALSE(registry
                   ->ApplyRefit(0, 1.0, 0.05, std::nullopt, std::nullopt,
                                std::nullopt, std::nullopt,
                                /*sp_compute_scale=*/1.03)
                   .value()
                   .has_value());
  ASSERT_EQ(registry
                ->ApplyRefit(0, 1.0, 0.05, std::nullopt, std::nullopt,
                             std::nullopt, std::nullopt,
                             /*sp_compute_scale=*/1.4)
                .value(),
            1);
  EXPECT_DOUBLE_EQ(CurrentParams().compute.sp_compute_scale,
                   fitted_scale * 1.4);
  // A later refit without one goes back to the fit's.
  ASSERT_EQ(registry->ApplyRefit(0, 1.5, 0.05).value(), 2);
  EXPECT_DOUBLE_EQ(CurrentParams().compute.sp_compute_scale, fitted_scale);
  const absl::StatusOr<std::optional<int64_t>> bad = registry->ApplyRefit(
      0, 1.0, 0.05, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
      /*sp_compute_scale=*/0.0);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("SP compute scale is 0"));
}

TEST_F(CostParamsRegistryTest, RefitScalesTheAllToAllTimeOnItsOwn) {
  const CommParams fitted = FittedParams().comm;
  // The compute correction unchanged, the all-to-all's: a new version.
  ASSERT_EQ(registry
                ->ApplyRefit(0, /*factor=*/1, 0.05,
                             /*communication_factor=*/4)
                .value(),
            1);
  const std::shared_ptr<const CostParamsSnapshot> after = registry->Snapshot();
  EXPECT_EQ(after->current->compute_correction, 1);
  EXPECT_EQ(after->current->communication_correction, 4);
  const CommParams& comm = after->current->cost_model->params().comm;
  EXPECT_DOUBLE_EQ(comm.all_to_all_inter_latency_seconds,
                   4 * fitted.all_to_all_inter_latency_seconds);
  EXPECT_DOUBLE_EQ(comm.all_to_all_intra_bus_bytes_per_second,
                   fitted.all_to_all_intra_bus_bytes_per_second / 4);
  // The gradient all-reduce is not the all-to-all: left as fitted.
  EXPECT_DOUBLE_EQ(comm.all_reduce_inter_latency_seconds,
                   fitted.all_reduce_inter_latency_seconds);
  // Within the threshold of both corrections: no new version.
  EXPECT_FALSE(registry->ApplyRefit(0, 1.02, 0.05, 4.1).value().has_value());
}

TEST_F(CostParamsRegistryTest, AFittedAllToAllReplacesItsKindsParameters) {
  const CommParams fitted = FittedParams().comm;
  ASSERT_EQ(registry
                ->ApplyRefit(0, /*factor=*/1, 0.05,
                             /*communication_factor=*/2,
                             /*all_to_all_intra=*/std::nullopt,
                             /*all_to_all_inter=*/std::make_pair(3e-4, 2e8))
                .value(),
            1);
  const CommParams comm = CurrentParams().comm;
  EXPECT_EQ(comm.all_to_all_inter_latency_seconds, 3e-4);
  EXPECT_EQ(comm.all_to_all_inter_bus_bytes_per_second, 2e8);
  // The other kind follows the factor.
  EXPECT_DOUBLE_EQ(comm.all_to_all_intra_latency_seconds,
                   2 * fitted.all_to_all_intra_latency_seconds);
  // The same fit again is no change.
  EXPECT_FALSE(registry
                   ->ApplyRefit(0, 1, 0.05, 2, std::nullopt,
                                std::make_pair(3.05e-4, 2e8))
                   .value()
                   .has_value());
}

TEST_F(CostParamsRegistryTest, AFitWithNewParametersIsANewEpoch) {
  ASSERT_TRUE(registry->ApplyRefit(0, 2, 0.05).ok());
  CostModelFit same;
  same.params = registry->default_params();
  ASSERT_TRUE(registry->ApplyFit(same).ok());
  // The same parameters as the previous fit keep the correction.
  EXPECT_EQ(registry->Snapshot()->current->version, 1);
  EXPECT_EQ(registry->Snapshot()->refit_epoch, 0);
  CostModelFit changed = same;
  changed.params.compute.gemm_flops_per_second *= 1.5;
  ASSERT_TRUE(registry->ApplyFit(changed).ok());
  std::shared_ptr<const CostParamsSnapshot> snapshot = registry->Snapshot();
  EXPECT_EQ(snapshot->current->version, 2);
  EXPECT_EQ(snapshot->refit_epoch, 2);
  EXPECT_EQ(snapshot->current->compute_correction, 1);
}

TEST_F(CostParamsRegistryTest, TheWorkersTrainingStateIsCountedAndKeptByFits) {
  // The defaults: bf16 with ZeRO-1.
  EXPECT_EQ(CurrentParams().memory.weight_bytes_per_parameter, 2);
  // fp32 AdamW, not sharded: weights 4, gradients 4, m and v 8.
  absl::StatusOr<std::optional<int64_t>> version = registry->SetTrainingState(
      TrainingPrecision::kFp32, ParameterSharding::kReplicated);
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, std::optional<int64_t>(1));
  EXPECT_EQ(CurrentParams().memory.weight_bytes_per_parameter, 4);
  EXPECT_EQ(CurrentParams().memory.optimizer_bytes_per_parameter, 8);
  EXPECT_FALSE(CurrentParams().memory.zero1_optimizer_sharding);
  // Declared again: nothing new.
  EXPECT_EQ(*registry->SetTrainingState(TrainingPrecision::kFp32,
                                        ParameterSharding::kReplicated),
            std::nullopt);
  // A profile does not measure it: a fit keeps the workers' state, and
  // their communicators.
  ASSERT_TRUE(registry->SetCommunicators(1e9, 3).ok());
  CostModelFit fit;
  fit.params = registry->default_params();
  fit.params.compute.gemm_flops_per_second *= 1.5;
  ASSERT_TRUE(registry->ApplyFit(fit).ok());
  EXPECT_EQ(CurrentParams().memory.weight_bytes_per_parameter, 4);
  EXPECT_FALSE(CurrentParams().memory.zero1_optimizer_sharding);
  EXPECT_EQ(CurrentParams().memory.communicators_per_rank, 3);
  // The model's static memory follows: fp32 unsharded holds 16 bytes per
  // parameter on every GPU, more than bf16 with ZeRO-1 (2 + 4 + 12 / 2).
  EXPECT_GT(registry->Snapshot()->current->cost_model->memory().StaticBytes(),
            registry->Version(0)->cost_model->memory().StaticBytes());
}

TEST_F(CostParamsRegistryTest, MicroBatchRefitSetsRateAndFixedTermsDurably) {
  const CostParams fitted = FittedParams();
  const MicroBatchRefit::Coefficients fit = {1.5, 0.02, 1e-3, 2e-4};
  ASSERT_EQ(registry
                ->ApplyRefit(0, /*factor=*/1.2, 0.05, std::nullopt,
                             std::nullopt, std::nullopt, fit)
                .value(),
            1);
  const std::shared_ptr<const ParamsVersion> made = registry->Version(1);
  EXPECT_TRUE(made->micro_batch_refit);
  EXPECT_EQ(made->compute_correction, 1.5);
  const ComputeParams& compute = made->cost_model->params().compute;
  EXPECT_DOUBLE_EQ(compute.gemm_flops_per_second,
                   fitted.compute.gemm_flops_per_second / 1.5);
  EXPECT_EQ(compute.micro_batch_fixed_seconds, 0.02);
  EXPECT_EQ(compute.layer_fixed_seconds, 1e-3);
  EXPECT_EQ(compute.sequence_layer_fixed_seconds, 2e-4);
  // A fixed term moving beyond the threshold makes a version; a rate scale
  // that is not positive is refused.
  MicroBatchRefit::Coefficients moved = fit;
  moved[3] = 3e-4;
  EXPECT_EQ(registry
                ->ApplyRefit(0, 1.2, 0.05, std::nullopt, std::nullopt,
                             std::nullopt, moved)
                .value(),
            2);
  moved[0] = 0;
  EXPECT_FALSE(registry
                   ->ApplyRefit(0, 1.2, 0.05, std::nullopt, std::nullopt,
                                std::nullopt, moved)
                   .ok());
  // The flag is read back from a version's record.
  v1::ParamsVersionRecord record;
  record.set_params_version(1);
  record.set_compute_correction(1.5);
  record.set_micro_batch_refit(true);
  *record.mutable_params() = CostParamsToProto(made->cost_model->params());
  *record.mutable_fitted_params() = CostParamsToProto(fitted);
  auto loaded = MakeRegistry();
  ASSERT_TRUE(loaded->Load({{1, record}}).ok());
  EXPECT_TRUE(loaded->Version(1)->micro_batch_refit);
  EXPECT_EQ(loaded->Version(1)
                ->cost_model->params()
                .compute.sequence_layer_fixed_seconds,
            2e-4);
}

}  // namespace
}  // namespace dcp
