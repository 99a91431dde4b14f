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
#include "worker/execution/latent_dataset.h"
#include "worker/execution/plan_executor.h"
#include "worker/execution/trainable_model.h"

namespace dcp {
namespace {

constexpr int kWorldSize = 4;
constexpr uint64_t kSeed = 4321;
constexpr int64_t kChannels = 8;
// fp32 throughout: the plans differ only in float rounding (summation
// order of GEMMs over other token counts, of the gradient all-reduce).
constexpr double kTolerance = 1e-5;
constexpr absl::Duration kSetupTimeout = absl::Seconds(30);
constexpr absl::Duration kRunTimeout = absl::Seconds(120);

// Lengths chosen so that some divide neither 2 nor 4.
const std::vector<int64_t>& SequenceLengths() {
  static const std::vector<int64_t> lengths = {13, 7, 20, 5, 16, 9, 11, 4};
  return lengths;
}

SequenceInput SequenceOf(int index) {
  static const SyntheticLatentDataset dataset =
      *SyntheticLatentDataset::Create(/*seed=*/17, kChannels);
  SequenceInput input;
  input.latent = *dataset.Sample(/*sample_id=*/100 + index,
                                 SequenceLengths().at(index));
  return input;
}

// The DiT's loss counts every token.
int64_t TotalLossTokens() {
  int64_t total = 0;
  for (int64_t length : SequenceLengths()) total += length;
  return total;
}

MicroBatchPlan MicroBatch(std::vector<int> sequences, int checkpointed) {
  MicroBatchPlan micro_batch;
  micro_batch.sequence_indices = std::move(sequences);
  micro_batch.checkpointed_layers = checkpointed;
  return micro_batch;
}

GroupPlan Group(std::vector<int> ranks, std::vector<MicroBatchPlan> mbs) {
  GroupPlan group;
  group.ranks = std::move(ranks);
  group.micro_batches = std::move(mbs);
  return group;
}

// The GPT test's four plans; each covers sequences 0..7 exactly once.
absl::StatusOr<Plan> PlanNamed(const std::string& name) {
  Plan plan;
  plan.strategy = name;
  if (name == "all_sp1_round_robin") {
    for (int rank = 0; rank < kWorldSize; ++rank) {
      plan.groups.push_back(
          Group({rank}, {MicroBatch({rank}, 0), MicroBatch({rank + 4}, 0)}));
    }
  } else if (name == "mixed_sp_1_1_2") {
    plan.groups = {
        Group({0},
              {MicroBatch({0}, 0), MicroBatch({3}, 1), MicroBatch({7}, 0)}),
        Group({1}, {MicroBatch({1, 5}, 2)}),
        Group({2, 3}, {MicroBatch({2}, 1), MicroBatch({4, 6}, 0)}),
    };
  } else if (name == "sp4_recompute") {
    plan.groups = {
        Group({0, 1, 2, 3}, {MicroBatch({0, 1}, 1), MicroBatch({2}, 2),
                             MicroBatch({3, 4, 5}, 1), MicroBatch({6, 7}, 2)})};
  } else if (name == "sp2_sp2_packings") {
    plan.groups = {
        Group({0, 1}, {MicroBatch({0, 2, 3}, 0), MicroBatch({7}, 1)}),
        Group({2, 3},
              {MicroBatch({1}, 2), MicroBatch({4, 5}, 0), MicroBatch({6}, 1)}),
    };
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown plan ", name));
  }
  return plan;
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

struct Snapshot {
  std::vector<std::string> names;
  std::vector<torch::Tensor> gradients;   // All-reduced, before the step.
  std::vector<torch::Tensor> parameters;  // After the step.
  double global_loss = 0;
};

Snapshot Take(torch::nn::Module& model, double global_loss) {
  Snapshot snapshot;
  for (const auto& item : model.named_parameters()) {
    snapshot.names.push_back(item.key());
    snapshot.gradients.push_back(item.value().grad().detach().clone());
    snapshot.parameters.push_back(item.value().detach().clone());
  }
  snapshot.global_loss = global_loss;
  return snapshot;
}

absl::StatusOr<Snapshot> SingleProcessReference() {
  absl::StatusOr<std::shared_ptr<DitModel>> model = TinyDit();
  if (!model.ok()) return model.status();
  FakeCommunicator communicator;
  PlanExecutor executor(*model, communicator, ExecutorOptions());
  std::vector<int> all(SequenceLengths().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  Plan plan;
  plan.groups = {Group({0}, {MicroBatch(all, 0)})};
  absl::StatusOr<StepResult> result =
      executor.RunStep(plan, SequenceOf, TotalLossTokens());
  if (!result.ok()) return result.status();
  return Take(**model, result->global_loss);
}

absl::Status CompareTo(const Snapshot& reference, const Snapshot& actual,
                       int rank) {
  double worst_gradient = 0, worst_parameter = 0, smallest_gradient = 1e30;
  std::string worst_gradient_name, worst_parameter_name;
  for (size_t i = 0; i < reference.names.size(); ++i) {
    smallest_gradient = std::min(
        smallest_gradient, reference.gradients[i].abs().max().item<double>());
    const double gradient_diff = (reference.gradients[i] - actual.gradients[i])
                                     .abs()
                                     .max()
                                     .item<double>();
    const double parameter_diff =
        (reference.parameters[i] - actual.parameters[i])
            .abs()
            .max()
            .item<double>();
    if (gradient_diff > worst_gradient) {
      worst_gradient = gradient_diff;
      worst_gradient_name = reference.names[i];
    }
    if (parameter_diff > worst_parameter) {
      worst_parameter = parameter_diff;
      worst_parameter_name = reference.names[i];
    }
  }
  std::printf(
      "[rank %d] DiT: max |grad - reference| = %.3g (%s), max |param - "
      "reference| = %.3g (%s), loss %.9f vs reference %.9f\n",
      rank, worst_gradient, worst_gradient_name.c_str(), worst_parameter,
      worst_parameter_name.c_str(), actual.global_loss, reference.global_loss);
  if (!(smallest_gradient > 0)) {
    return absl::InternalError(
        "a parameter of the reference has an all-zero gradient; the check "
        "would not see it");
  }
  if (!(worst_gradient < kTolerance) || !(worst_parameter < kTolerance) ||
      !(std::abs(actual.global_loss - reference.global_loss) < kTolerance)) {
    return absl::InternalError(absl::StrCat(
        "plan differs from the single-process reference: max gradient diff ",
        worst_gradient, " (", worst_gradient_name, "), max parameter diff ",
        worst_parameter, " (", worst_parameter_name, "), loss ",
        actual.global_loss, " vs ", reference.global_loss, "; tolerance ",
        kTolerance));
  }
  return absl::OkStatus();
}

absl::Status CheckRanksAgree(Communicator& communicator,
                             torch::nn::Module& model) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : model.parameters()) {
    flat.push_back(p.detach().reshape({-1}));
  }
  torch::Tensor own = torch::cat(flat);
  torch::Tensor rows =
      torch::zeros({communicator.world_size(), own.numel()}, own.options());
  rows[communicator.rank()].copy_(own);
  absl::Status status =
      communicator.World().AllReduceSum(rows, absl::Seconds(30));
  if (!status.ok()) return status;
  for (int r = 0; r < communicator.world_size(); ++r) {
    if (!torch::equal(rows[r], own)) {
      return absl::InternalError(
          absl::StrCat("rank ", communicator.rank(), " and rank ", r,
                       " hold different parameters after the step"));
    }
  }
  return absl::OkStatus();
}

DCP_RANK_MAIN(RunDitPlanAndCompare) {
  absl::StatusOr<Snapshot> reference = SingleProcessReference();
  if (!reference.ok()) return reference.status();
  absl::StatusOr<Plan> plan = PlanNamed(context.arg);
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
  absl::Status compared =
      CompareTo(*reference, Take(**model, result->global_loss), context.rank);
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

INSTANTIATE_TEST_SUITE_P(Plans, DitGradientEquivalenceTest,
                         ::testing::Values("all_sp1_round_robin",
                                           "mixed_sp_1_1_2", "sp4_recompute",
                                           "sp2_sp2_packings"));

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
  EXPECT_FALSE(
      CompareTo(*reference, Take(**model, result->global_loss), /*rank=*/0)
          .ok());
}

}  // namespace
}  // namespace dcp
