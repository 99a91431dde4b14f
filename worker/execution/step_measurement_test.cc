// What PlanExecutor measures of a step: the peak memory of the whole step
// (not only its last micro-batch), and every time read only after the
// device has run the work it times.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "cost_model/model_spec.h"
#include "gtest/gtest.h"
#include "planner/plan/plan.h"
#include "torch/torch.h"
#include "worker/communication/fake_communicator.h"
#include "worker/execution/cpu_allocation_meter.h"
#include "worker/execution/model.h"
#include "worker/execution/plan_executor.h"

namespace dcp {
namespace {

// Sequence 0 is long, 1 short: the first micro-batch's activations dwarf
// the second's.
constexpr int64_t kLongTokens = 768;
constexpr int64_t kShortTokens = 8;

std::vector<int64_t> Tokens(int index) {
  const int64_t length = index == 0 ? kLongTokens : kShortTokens;
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < length; ++i) tokens.push_back((i * 31 + 7) % 256);
  return tokens;
}

// One rank, one group, micro-batch 0 = {sequence 0}, 1 = {sequence 1}.
Plan LongThenShort() {
  Plan plan;
  GroupPlan group;
  group.ranks = {0};
  MicroBatchPlan first;
  first.sequence_indices = {0};
  MicroBatchPlan second;
  second.sequence_indices = {1};
  group.micro_batches = {first, second};
  plan.groups = {group};
  return plan;
}

std::shared_ptr<GptModel> TinyModel() {
  absl::StatusOr<ModelSpec> spec = ModelPreset("tiny");
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::shared_ptr<GptModel>> model =
      GptModel::Create(*spec, GptModelOptions{});
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

constexpr int64_t kLossTokens = kLongTokens - 1 + kShortTokens - 1;

TEST(StepMeasurementTest, StepPeakIsTheLargestMicroBatchNotTheLast) {
  CpuAllocationMeter& meter = CpuAllocationMeter::Get();
  meter.Install();
  {
    FakeCommunicator communicator;
    PlanExecutor executor(TinyModel(), communicator, PlanExecutorOptions{});
    absl::StatusOr<StepResult> result =
        executor.RunStep(LongThenShort(), Tokens, kLossTokens);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->micro_batches.size(), 2u);
    const int64_t long_peak = result->micro_batches[0].peak_allocated_bytes;
    const int64_t short_peak = result->micro_batches[1].peak_allocated_bytes;
    ASSERT_GT(long_peak, short_peak);
    EXPECT_GE(result->peak_allocated_bytes, long_peak);
    EXPECT_GT(result->peak_allocated_bytes, short_peak);
  }
  meter.Uninstall();
}

TEST(StepMeasurementTest, UnmeasuredDevicesReportNoPeak) {
  ASSERT_FALSE(CpuAllocationMeter::Get().installed());
  FakeCommunicator communicator;
  PlanExecutor executor(TinyModel(), communicator, PlanExecutorOptions{});
  absl::StatusOr<StepResult> result =
      executor.RunStep(LongThenShort(), Tokens, kLossTokens);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->peak_allocated_bytes, -1);
}

// Records whether the device was waited for since the last clock read.
class WaitCheckingClock final : public Clock {
 public:
  absl::Time Now() const override { return MonotonicNow(); }
  absl::Time MonotonicNow() const override {
    ++reads_;
    if (!waited_) ++reads_without_wait_;
    waited_ = false;
    now_ += absl::Milliseconds(1);
    return now_;
  }
  void Waited() { waited_ = true; }

  int reads() const { return reads_; }
  int reads_without_wait() const { return reads_without_wait_; }

 private:
  mutable absl::Time now_ = absl::UnixEpoch();
  mutable bool waited_ = false;
  mutable int reads_ = 0;
  mutable int reads_without_wait_ = 0;
};

TEST(StepMeasurementTest, EveryClockReadFollowsAWaitForTheDevice) {
  WaitCheckingClock clock;
  FakeCommunicator communicator;
  PlanExecutorOptions options;
  options.clock = &clock;
  options.wait_for_device = [&clock] { clock.Waited(); };
  PlanExecutor executor(TinyModel(), communicator, options);
  absl::StatusOr<StepResult> result =
      executor.RunStep(LongThenShort(), Tokens, kLossTokens);
  ASSERT_TRUE(result.ok()) << result.status();
  // Two micro-batches (start, end) and the gradient reduction (start, end).
  EXPECT_GE(clock.reads(), 6);
  EXPECT_EQ(clock.reads_without_wait(), 0);
}

}  // namespace
}  // namespace dcp
