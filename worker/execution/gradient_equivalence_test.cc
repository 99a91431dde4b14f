// The core correctness check of plan execution: one global batch run under
// very different plans (SP sizes, packings, accumulation counts, recompute)
// over 4 Gloo ranks on loopback gives the same gradients and the same
// parameters after an AdamW step as one process running the whole batch with
// SP 1 and no recompute. Each rank is a child process (see
// multiprocess_test_util.h) that computes the single-process reference
// itself, then runs the plan, then compares.
//
// Each plan runs in three modes: fp32 (torch's AdamW on every rank), fp32
// with ZeRO-1 (reduce-scattered gradients, sharded master weights and
// AdamW, all-gathered weights) and bf16 with ZeRO-1. With ZeRO-1 a rank's
// parameter gradients are only partly reduced, so what is compared is its
// reduce-scattered gradient shard and the parameters after the step.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
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
#include "worker/execution/equivalence_test_support.h"
#include "worker/execution/model.h"
#include "worker/execution/plan_executor.h"

namespace dcp {
namespace {

using ::dcp::testing::CheckRanksAgree;
using ::dcp::testing::EquivalencePlanNamed;
using ::dcp::testing::EquivalenceSequenceLengths;
using ::dcp::testing::Group;
using ::dcp::testing::MicroBatch;
using ::dcp::testing::Snapshot;
using ::dcp::testing::TakeSnapshot;

using ::dcp::testing::RankContext;

constexpr int kWorldSize = 4;
constexpr uint64_t kSeed = 1234;
constexpr double kTolerance = 1e-5;
constexpr absl::Duration kSetupTimeout = absl::Seconds(30);
constexpr absl::Duration kRunTimeout = absl::Seconds(120);

std::vector<int64_t> SequenceTokens(int index) {
  std::vector<int64_t> tokens;
  const int64_t length = EquivalenceSequenceLengths().at(index);
  for (int64_t i = 0; i < length; ++i) {
    tokens.push_back((i * 53 + index * 97 + (i * i) % 17 + 3) % 256);
  }
  return tokens;
}

int64_t TotalLossTokens() {
  int64_t total = 0;
  for (int64_t length : EquivalenceSequenceLengths()) total += length - 1;
  return total;
}

/// How a plan runs: the model's dtype and whether ZeRO-1 shards the update.
struct Mode {
  torch::Dtype dtype = torch::kFloat32;
  bool zero1 = false;
};

absl::StatusOr<Mode> ModeNamed(const std::string& name) {
  if (name == "fp32") return Mode{torch::kFloat32, false};
  if (name == "fp32_zero1") return Mode{torch::kFloat32, true};
  if (name == "bf16_zero1") return Mode{torch::kBFloat16, true};
  return absl::InvalidArgumentError(absl::StrCat("unknown mode ", name));
}

absl::StatusOr<std::shared_ptr<GptModel>> TinyModel(
    torch::Dtype dtype = torch::kFloat32) {
  absl::StatusOr<ModelSpec> spec = ModelPreset("tiny");
  if (!spec.ok()) return spec.status();
  GptModelOptions options;
  options.seed = kSeed;
  options.dtype = dtype;
  return GptModel::Create(*spec, options);
}

PlanExecutorOptions ExecutorOptions(bool zero1 = false) {
  PlanExecutorOptions options;
  options.zero1 = zero1;
  options.collective_timeout = absl::Seconds(30);
  options.learning_rate = 1e-3;
  options.weight_decay = 0.1;
  // Adam's first step moves each weight by lr * g / (|g| + eps): for a
  // gradient element near 0 it magnifies float rounding of g by up to
  // lr / eps. With eps = 1e-8 rounding-level gradient differences (~2e-8)
  // already move weights by ~2e-6; 1e-6 keeps that well under the tolerance
  // without hiding real gradient errors, which the gradient check sees first.
  options.adam_epsilon = 1e-6;
  return options;
}

// The whole batch on one rank: SP 1, one micro-batch, no recompute.
absl::StatusOr<Snapshot> SingleProcessReference() {
  absl::StatusOr<std::shared_ptr<GptModel>> model = TinyModel();
  if (!model.ok()) return model.status();
  FakeCommunicator communicator;
  PlanExecutor executor(*model, communicator, ExecutorOptions());
  const Plan plan = ::dcp::testing::SingleProcessPlan();
  absl::StatusOr<StepResult> result =
      executor.RunStep(plan, SequenceTokens, TotalLossTokens());
  if (!result.ok()) return result.status();
  return TakeSnapshot(**model, result->global_loss);
}

absl::Status CompareTo(const Snapshot& reference, const Snapshot& actual,
                       int rank) {
  return ::dcp::testing::CompareSnapshots(reference, actual, kTolerance, "GPT",
                                          rank);
}

// The flattened reference gradient (parameters() order, zero-padded).
torch::Tensor FlatGradient(const Snapshot& snapshot, int64_t padded_size) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& g : snapshot.gradients) {
    flat.push_back(g.reshape({-1}).to(torch::kFloat32));
  }
  torch::Tensor whole = torch::cat(flat);
  return torch::constant_pad_nd(whole, {0, padded_size - whole.numel()});
}

// bf16 keeps 8 significant bits: each product, activation and stored
// gradient is rounded with a relative error of up to 2^-9, and the errors of
// the 2 layers' forward and backward chains compound (roughly with the
// square root of the number of rounded operations on a path, a few hundred
// here). Measured on these plans the reduce-scattered bf16 gradient differs
// from the exact fp32 one by at most 1.4% of the shard's largest gradient
// (0.6-1.4% over the plans and shards); 6% leaves room for other kernels
// and thread counts and still fails for a missing sequence (61%, see
// MissingSequenceIsDetectedInBf16).
constexpr double kBf16RelativeGradientTolerance = 0.06;

// The update after one AdamW step: each element moves by about lr in the
// direction of its gradient's sign whatever the gradient's size, so a
// gradient near zero whose bf16 sign differs moves its weight by up to
// 2 lr; the bf16 weights themselves are rounded to 2^-8 of their size (the
// initial cast plus the write-back).
bool Bf16ParametersClose(const torch::Tensor& actual,
                         const torch::Tensor& reference, double lr) {
  torch::Tensor a = actual.to(torch::kFloat64);
  torch::Tensor r = reference.to(torch::kFloat64);
  return ((a - r).abs() <= 2 * lr + r.abs() * (2.0 / 256) + 1e-7)
      .all()
      .item<bool>();
}

// Compares the ZeRO-1 step of `executor` (its reduce-scattered gradient
// shard, the parameters after the step, the loss) with the fp32 reference:
// tightly in fp32, with the bf16 bounds above in bf16.
absl::Status CompareZero1To(const Snapshot& reference, PlanExecutor& executor,
                            double global_loss, bool bf16, int rank,
                            int world_size = kWorldSize) {
  torch::Tensor shard = executor.reduced_gradient_shard();
  if (!shard.defined()) {
    return absl::InternalError("ZeRO-1 executor has no gradient shard");
  }
  torch::Tensor expected =
      FlatGradient(reference, shard.numel() * world_size)
          .narrow(0, executor.shard_offset(), shard.numel());
  const double gradient_diff = (shard - expected).abs().max().item<double>();
  const double gradient_scale = expected.abs().max().item<double>();
  Snapshot actual = TakeSnapshot(executor.model(), global_loss);
  double parameter_diff = 0;
  std::string far_parameter;
  for (size_t i = 0; i < reference.names.size(); ++i) {
    const double diff = (actual.parameters[i].to(torch::kFloat64) -
                         reference.parameters[i].to(torch::kFloat64))
                            .abs()
                            .max()
                            .item<double>();
    const bool close = bf16 ? Bf16ParametersClose(
                                  actual.parameters[i], reference.parameters[i],
                                  ExecutorOptions().learning_rate)
                            : diff < kTolerance;
    if (!close && far_parameter.empty()) far_parameter = reference.names[i];
    parameter_diff = std::max(parameter_diff, diff);
  }
  const double loss_diff = std::abs(global_loss - reference.global_loss);
  std::printf(
      "[rank %d] %s ZeRO-1: gradient shard at %lld: max |diff| %.3g of max "
      "|gradient| %.3g (relative %.3g); max |param - reference| %.3g; loss "
      "%.9f vs %.9f\n",
      rank, bf16 ? "bf16" : "fp32",
      static_cast<long long>(executor.shard_offset()), gradient_diff,
      gradient_scale, gradient_diff / gradient_scale, parameter_diff,
      global_loss, reference.global_loss);
  const bool gradient_ok =
      bf16 ? gradient_diff <= kBf16RelativeGradientTolerance * gradient_scale
           : gradient_diff < kTolerance;
  const bool loss_ok =
      bf16 ? loss_diff < 1e-2 * reference.global_loss : loss_diff < kTolerance;
  if (!(gradient_scale > 0) || !gradient_ok || !far_parameter.empty() ||
      !loss_ok) {
    return absl::InternalError(absl::StrCat(
        "ZeRO-1 ", bf16 ? "bf16" : "fp32",
        " step differs from the single-process reference: gradient shard "
        "diff ",
        gradient_diff, " of scale ", gradient_scale, ", parameter ",
        far_parameter.empty() ? "(all close)" : far_parameter, " max diff ",
        parameter_diff, ", loss ", global_loss, " vs ", reference.global_loss));
  }
  return absl::OkStatus();
}

// Runs `plan` in `mode` over `communicator` and compares with `reference`.
absl::Status RunModeAndCompare(const Snapshot& reference, const Plan& plan,
                               const std::string& mode_name,
                               Communicator& communicator, int rank) {
  absl::StatusOr<Mode> mode = ModeNamed(mode_name);
  if (!mode.ok()) return mode.status();
  absl::StatusOr<std::shared_ptr<GptModel>> model = TinyModel(mode->dtype);
  if (!model.ok()) return model.status();

  PlanExecutor executor(*model, communicator, ExecutorOptions(mode->zero1));
  absl::StatusOr<StepResult> result =
      executor.RunStep(plan, SequenceTokens, TotalLossTokens());
  if (!result.ok()) return result.status();
  const GroupPlan& group = plan.groups[result->group_index];
  if (result->micro_batches.size() != group.micro_batches.size() ||
      result->sp_size != group.sp_size()) {
    return absl::InternalError("step result does not match the plan's group");
  }
  for (const MicroBatchResult& micro_batch : result->micro_batches) {
    // Two all-to-alls per layer forward and backward, plus the re-run of the
    // recomputed layers' forward.
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
      mode->zero1 ? CompareZero1To(reference, executor, result->global_loss,
                                   mode->dtype != torch::kFloat32, rank)
                  : CompareTo(reference,
                              TakeSnapshot(**model, result->global_loss), rank);
  if (!compared.ok()) return compared;
  return CheckRanksAgree(communicator, **model);
}

// context.arg names the plan; it runs in every mode, one after the other,
// in one world.
DCP_RANK_MAIN(RunPlanAndCompare) {
  // The reference first, before any collective, in every rank.
  absl::StatusOr<Snapshot> reference = SingleProcessReference();
  if (!reference.ok()) return reference.status();
  absl::StatusOr<Plan> plan = EquivalencePlanNamed(context.arg);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      ::dcp::testing::JoinC10dTestWorld(
          context, absl::StrCat("gradient_equivalence_", context.arg),
          kSetupTimeout);
  if (!communicator.ok()) return communicator.status();
  for (const char* mode : {"fp32", "fp32_zero1", "bf16_zero1"}) {
    absl::Status status = RunModeAndCompare(*reference, *plan, mode,
                                            **communicator, context.rank);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("mode ", mode, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

class GradientEquivalenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GradientEquivalenceTest, PlanMatchesSingleProcessReferenceInEveryMode) {
  absl::StatusOr<std::vector<int>> exit_codes = dcp::testing::RunRanks(
      kWorldSize, kRunTimeout, "RunPlanAndCompare", GetParam());
  ASSERT_TRUE(exit_codes.ok()) << exit_codes.status();
  EXPECT_THAT(*exit_codes, ::testing::Each(0));
}

INSTANTIATE_TEST_SUITE_P(
    Plans, GradientEquivalenceTest,
    ::testing::ValuesIn(::dcp::testing::EquivalencePlanNames()));

// The "sp4_recompute" plan runs SP 4 on the tiny model's 2 KV heads, so the
// equivalence above covers KV heads replicated across the group (two copies
// each); this keeps that coverage from silently going away.
TEST(GradientEquivalencePlansTest, Sp4PlanRunsBeyondTheKvHeadCount) {
  absl::StatusOr<ModelSpec> tiny = ModelPreset("tiny");
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->UlyssesKvCopies(4), 2);
  absl::StatusOr<Plan> plan = EquivalencePlanNamed("sp4_recompute");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->groups.size(), 1u);
  EXPECT_EQ(plan->groups[0].sp_size(), 4);
}

// The reference itself must not be trivially equal to anything: the step
// changes every parameter, and a plan missing one sequence does not match.
TEST(GradientEquivalenceReferenceTest, MissingSequenceIsDetected) {
  absl::StatusOr<Snapshot> reference = SingleProcessReference();
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<std::shared_ptr<GptModel>> model = TinyModel();
  ASSERT_TRUE(model.ok());
  FakeCommunicator communicator;
  PlanExecutor executor(*model, communicator, ExecutorOptions());
  Plan plan;
  plan.groups = {Group({0}, {MicroBatch({0, 1, 2, 3, 4, 5, 6}, 0)})};
  absl::StatusOr<StepResult> result =
      executor.RunStep(plan, SequenceTokens, TotalLossTokens());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(CompareTo(*reference, TakeSnapshot(**model, result->global_loss),
                         /*rank=*/0)
                   .ok());
}

}  // namespace
}  // namespace dcp

namespace dcp {
namespace {

// The bf16 tolerances still see a missing sequence: one process, bf16 with
// master weights, the batch without sequence 7.
TEST(GradientEquivalenceReferenceTest, MissingSequenceIsDetectedInBf16) {
  absl::StatusOr<Snapshot> reference = SingleProcessReference();
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<std::shared_ptr<GptModel>> model = TinyModel(torch::kBFloat16);
  ASSERT_TRUE(model.ok());
  FakeCommunicator communicator;
  PlanExecutor executor(*model, communicator, ExecutorOptions(/*zero1=*/true));
  ASSERT_TRUE(executor.has_master_weights());
  Plan plan;
  plan.groups = {Group({0}, {MicroBatch({0, 1, 2, 3, 4, 5, 6, 7}, 0)})};
  absl::StatusOr<StepResult> result =
      executor.RunStep(plan, SequenceTokens, TotalLossTokens());
  ASSERT_TRUE(result.ok()) << result.status();
  // The whole batch in bf16 passes ...
  EXPECT_TRUE(CompareZero1To(*reference, executor, result->global_loss,
                             /*bf16=*/true, /*rank=*/0, /*world_size=*/1)
                  .ok());
  // ... and without one sequence fails.
  absl::StatusOr<std::shared_ptr<GptModel>> other = TinyModel(torch::kBFloat16);
  ASSERT_TRUE(other.ok());
  PlanExecutor missing(*other, communicator, ExecutorOptions(/*zero1=*/true));
  plan.groups = {Group({0}, {MicroBatch({0, 1, 2, 3, 4, 5, 6}, 0)})};
  result = missing.RunStep(plan, SequenceTokens, TotalLossTokens());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(CompareZero1To(*reference, missing, result->global_loss,
                              /*bf16=*/true, /*rank=*/0, /*world_size=*/1)
                   .ok());
}

}  // namespace
}  // namespace dcp
