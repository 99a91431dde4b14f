// gradient_equivalence_test.cc's check for the video DiT: one global batch
// of latent samples run under very different plans (SP sizes, packings,
// accumulation counts, recompute) over 4 Gloo ranks on loopback gives the
// same gradients and the same parameters after an AdamW step as one process
// running the whole batch with SP 1 and no recompute. Each rank is a child
// process (multiprocess_test_util.h) that computes the reference itself.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan.h"
#include "torch/torch.h"
#include "worker/communication/c10d_test_world.h"
#include "worker/communication/communicator.h"
#include "worker/communication/fake_communicator.h"
#include "worker/communication/multiprocess_test_util.h"
#include "worker/execution/dit_model.h"
#include "worker/execution/equivalence_test_support.h"
#include "worker/execution/latent_dataset.h"
#include "worker/execution/plan_executor.h"
#include "worker/execution/trainable_model.h"

namespace dcp {
namespace {

using ::dcp::testing::CheckRanksAgree;
using ::dcp::testing::EquivalencePlanNamed;
using ::dcp::testing::EquivalenceSequenceLengths;
using ::dcp::testing::Group;
using ::dcp::testing::MicroBatch;
using ::dcp::testing::Snapshot;
using ::dcp::testing::TakeSnapshot;

constexpr int kWorldSize = 4;
constexpr uint64_t kSeed = 4321;
constexpr int64_t kChannels = 8;
// fp32 throughout: the plans differ only in float rounding (summation
// order of GEMMs over other token counts, of the gradient all-reduce).
constexpr double kTolerance = 1e-5;
constexpr absl::Duration kSetupTimeout = absl::Seconds(30);
constexpr absl::Duration kRunTimeout = absl::Seconds(120);

SequenceInput SequenceOf(int index) {
  static const SyntheticLatentDataset dataset =
      *SyntheticLatentDataset::Create(/*seed=*/17, kChannels);
  SequenceInput input;
  input.latent = *dataset.Sample(/*sample_id=*/100 + index,
                                 EquivalenceSequenceLengths().at(index));
  return input;
}

// The DiT's loss counts every token.
int64_t TotalLossTokens() {
  int64_t total = 0;
  for (int64_t length : EquivalenceSequenceLengths()) total += length;
  return total;
}

absl::StatusOr<std::shared_ptr<DitModel>> TinyDit() {
  absl::StatusOr<ModelSpec> spec = ModelPreset("tiny-dit");
  if (!spec.ok()) return spec.status();
  DitModelOptions options;
  options.seed = kSeed;
  options.dtype = torch::kFloat32;
  options.latent_channels = kChannels;
  // Random modulation: with adaLN-Zero most gradients would be exactly 0 at
  // the first step, and the check would see little.
  options.zero_init_modulation = false;
  return DitModel::Create(*spec, options);
}

PlanExecutorOptions ExecutorOptions() {
  PlanExecutorOptions options;
  options.collective_timeout = absl::Seconds(30);
  options.learning_rate = 1e-3;
  options.weight_decay = 0.1;
  // As in the GPT test: a larger epsilon keeps Adam's first step from
  // magnifying rounding-level gradient differences near zero.
  options.adam_epsilon = 1e-6;
  return options;
}

absl::StatusOr<Snapshot> SingleProcessReference() {
  absl::StatusOr<std::shared_ptr<DitModel>> model = TinyDit();
  if (!model.ok()) return model.status();
  FakeCommunicator communicator;
  PlanExecutor executor(*model, communicator, ExecutorOptions());
  const Plan plan = ::dcp::testing::SingleProcessPlan();
  absl::StatusOr<StepResult> result =
      executor.RunStep(plan, SequenceOf, TotalLossTokens());
  if (!result.ok()) return result.status();
  return TakeSnapshot(**model, result->global_loss);
}

absl::Status CompareTo(const Snapshot& reference, const Snapshot& actual,
                       int rank) {
  return ::dcp::testing::CompareSnapshots(reference, actual, kTolerance, "DiT",
                                          rank,
                                          /*require_nonzero_gradients=*/true);
}

DCP_RANK_MAIN(RunDitPlanAndCompare) {
  absl::StatusOr<Snapshot> reference = SingleProcessReference();
  if (!reference.ok()) return reference.status();
  absl::StatusOr<Plan> plan = EquivalencePlanNamed(context.arg);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      ::dcp::testing::JoinC10dTestWorld(
          context, absl::StrCat("dit_gradient_equivalence_", context.arg),
          kSetupTimeout);
  if (!communicator.ok()) return communicator.status();
  absl::StatusOr<std::shared_ptr<DitModel>> model = TinyDit();
  if (!model.ok()) return model.status();

  PlanExecutor executor(*model, **communicator, ExecutorOptions());
  absl::StatusOr<StepResult> result =
      executor.RunStep(*plan, SequenceOf, TotalLossTokens());
  if (!result.ok()) return result.status();
  const GroupPlan& group = plan->groups[result->group_index];
  if (result->micro_batches.size() != group.micro_batches.size() ||
      result->sp_size != group.sp_size()) {
    return absl::InternalError("step result does not match the plan's group");
  }
  for (const MicroBatchResult& micro_batch : result->micro_batches) {
    // Ulysses as for the GPT: two all-to-alls per block forward and
    // backward, plus the re-run of the recomputed blocks' forward.
    const int64_t layers = (*model)->spec().num_layers;
    const int64_t expected =
        result->sp_size == 1
            ? 0
            : 4 * layers + 2 * std::min<int64_t>(
                                   micro_batch.checkpointed_layers, layers);
    if (micro_batch.all_to_all_calls != expected) {
      return absl::InternalError(
          absl::StrCat("micro-batch made ", micro_batch.all_to_all_calls,
                       " all-to-alls; expected ", expected));
    }
  }
  absl::Status compared = CompareTo(
      *reference, TakeSnapshot(**model, result->global_loss), context.rank);
  if (!compared.ok()) return compared;
  return CheckRanksAgree(**communicator, **model);
}

class DitGradientEquivalenceTest
    : public ::testing::TestWithParam<std::string> {};

TEST_P(DitGradientEquivalenceTest, PlanMatchesSingleProcessReference) {
  absl::StatusOr<std::vector<int>> exit_codes = dcp::testing::RunRanks(
      kWorldSize, kRunTimeout, "RunDitPlanAndCompare", GetParam());
  ASSERT_TRUE(exit_codes.ok()) << exit_codes.status();
  EXPECT_THAT(*exit_codes, ::testing::Each(0));
}

INSTANTIATE_TEST_SUITE_P(
    Plans, DitGradientEquivalenceTest,
    ::testing::ValuesIn(::dcp::testing::EquivalencePlanNames()));

// The comparison can fail: a plan missing one sequence does not match.
TEST(DitGradientEquivalenceReferenceTest, MissingSequenceIsDetected) {
  absl::StatusOr<Snapshot> reference = SingleProcessReference();
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<std::shared_ptr<DitModel>> model = TinyDit();
  ASSERT_TRUE(model.ok());
  FakeCommunicator communicator;
  PlanExecutor executor(*model, communicator, ExecutorOptions());
  Plan plan;
  plan.groups = {Group({0}, {MicroBatch({0, 1, 2, 3, 4, 5, 6}, 0)})};
  absl::StatusOr<StepResult> result =
      executor.RunStep(plan, SequenceOf, TotalLossTokens());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(CompareTo(*reference, TakeSnapshot(**model, result->global_loss),
                         /*rank=*/0)
                   .ok());
}

}  // namespace
}  // namespace dcp
