// Memory measured, not assumed: on 4 Gloo ranks, the bytes a rank holds in
// parameter, gradient and optimizer tensors after a step (and what the CPU
// allocator holds, through CpuAllocationMeter) agree with
// MemoryModel::StaticBytes() for the same precision and ZeRO-1 setting.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cost_model/memory_model.h"
#include "cost_model/model_spec.h"
#include "gtest/gtest.h"
#include "planner/plan/plan.h"
#include "torch/torch.h"
#include "worker/communication/c10d_test_world.h"
#include "worker/communication/communicator.h"
#include "worker/communication/multiprocess_test_util.h"
#include "worker/execution/cpu_allocation_meter.h"
#include "worker/execution/model.h"
#include "worker/execution/plan_executor.h"

namespace dcp {
namespace {

constexpr int kWorldSize = 4;
constexpr absl::Duration kSetupTimeout = absl::Seconds(30);
constexpr absl::Duration kRunTimeout = absl::Seconds(120);
// The measured state differs from the model only by the padding of the flat
// buffers to a multiple of the world (< 4 elements).
constexpr double kStateTolerance = 0.01;

std::vector<int64_t> Tokens(int index) {
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 10 + 3 * index; ++i) {
    tokens.push_back((i * 31 + index * 7 + 1) % 256);
  }
  return tokens;
}

struct Setting {
  std::string name;
  TrainingPrecision precision;
  bool zero1;
};

// Takes the communicator so that it can end it before reading the allocator:
// Gloo's worker threads drop their references to a collective's tensors (for
// a reduce-scatter, a clone of its whole input) a moment after the caller's
// wait returns, and only joining those threads makes the count exact.
absl::Status MeasureAndCompare(const Setting& setting,
                               std::unique_ptr<Communicator> communicator) {
  CpuAllocationMeter& meter = CpuAllocationMeter::Get();
  const int64_t before = meter.current_bytes();
  absl::StatusOr<ModelSpec> spec = ModelPreset("tiny");
  if (!spec.ok()) return spec.status();
  GptModelOptions model_options;
  model_options.dtype = setting.precision == TrainingPrecision::kBf16
                            ? torch::kBFloat16
                            : torch::kFloat32;
  absl::StatusOr<std::shared_ptr<GptModel>> model =
      GptModel::Create(*spec, model_options);
  if (!model.ok()) return model.status();
  PlanExecutorOptions options;
  options.zero1 = setting.zero1;
  options.collective_timeout = absl::Seconds(30);
  PlanExecutor executor(*model, *communicator, options);

  Plan plan;
  int64_t loss_tokens = 0;
  for (int rank = 0; rank < kWorldSize; ++rank) {
    GroupPlan group;
    group.ranks = {rank};
    MicroBatchPlan micro_batch;
    micro_batch.sequence_indices = {rank};
    group.micro_batches = {micro_batch};
    plan.groups.push_back(group);
    loss_tokens += static_cast<int64_t>(Tokens(rank).size()) - 1;
  }
  // Two steps: AdamW's moments exist from the first on, so the second
  // step's micro-batch runs with all the static state allocated.
  absl::StatusOr<StepResult> result =
      executor.RunStep(plan, Tokens, loss_tokens);
  if (!result.ok()) return result.status();
  result = executor.RunStep(plan, Tokens, loss_tokens);
  if (!result.ok()) return result.status();

  // The executor keeps a reference to the communicator but uses it only in
  // RunStep, which is not called again.
  const int rank = communicator->rank();
  communicator.reset();

  MemoryParams params = DefaultMemoryParams(*spec);
  SetTrainingStateBytes(setting.precision, setting.zero1, params);
  const double modelled = MemoryModel(*spec, params, kWorldSize).StaticBytes();
  const TrainingStateBytes held = executor.HeldStateBytes();
  const int64_t allocated = meter.current_bytes() - before;
  const int64_t peak = result->micro_batches.front().peak_allocated_bytes;
  const double state_error = held.total() / modelled - 1;
  const double allocator_error = allocated / modelled - 1;
  std::printf(
      "[rank %d] %s: MemoryModel static %.0f bytes; held %lld (parameters "
      "%lld, gradients %lld, optimizer %lld; %+.3f%%); allocator holds %lld "
      "(%+.3f%%); micro-batch peak %lld\n",
      rank, setting.name.c_str(), modelled,
      static_cast<long long>(held.total()),
      static_cast<long long>(held.parameter_bytes),
      static_cast<long long>(held.gradient_bytes),
      static_cast<long long>(held.optimizer_bytes), 100 * state_error,
      static_cast<long long>(allocated), 100 * allocator_error,
      static_cast<long long>(peak));
  if (!(std::abs(state_error) < kStateTolerance) ||
      allocated != held.total()) {
    return absl::InternalError(absl::StrCat(
        setting.name, ": measured state ", held.total(), " bytes (allocator ",
        allocated, ") differs from MemoryModel::StaticBytes() ", modelled));
  }
  // The micro-batch's peak counts everything held, activations on top.
  if (!(peak > before + held.total())) {
    return absl::InternalError(absl::StrCat(
        setting.name, ": micro-batch peak ", peak,
        " bytes is not above the static state ", before + held.total()));
  }
  return absl::OkStatus();
}

// context.arg names the setting. One setting per process: tensors another
// setting's collectives handed to Gloo may be freed late, during this one.
DCP_RANK_MAIN(MeasureStaticBytes) {
  // Before any tensor exists, so that every allocation is counted.
  CpuAllocationMeter::Get().Install();
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      ::dcp::testing::JoinC10dTestWorld(
          context, absl::StrCat("state_memory_", context.arg), kSetupTimeout);
  if (!communicator.ok()) return communicator.status();
  for (const Setting& setting :
       {Setting{"fp32", TrainingPrecision::kFp32, false},
        Setting{"fp32_zero1", TrainingPrecision::kFp32, true},
        Setting{"bf16_zero1", TrainingPrecision::kBf16, true}}) {
    if (setting.name == context.arg) {
      return MeasureAndCompare(setting, *std::move(communicator));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown setting ", context.arg));
}

class StateMemoryTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StateMemoryTest, MeasuredStaticBytesMatchTheMemoryModel) {
  EXPECT_TRUE(dcp::testing::EveryRankSucceeded(
      kWorldSize, kRunTimeout, "MeasureStaticBytes", GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Settings, StateMemoryTest,
                         ::testing::Values("fp32", "fp32_zero1", "bf16_zero1"));

}  // namespace
}  // namespace dcp
