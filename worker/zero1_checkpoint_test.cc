// Checkpoints of runs with float32 master weights (ZeRO-1 in fp32 and bf16)
// over 4 Gloo ranks: every rank's shard is gathered to rank 0's one file,
// and a run resumed from it takes exactly the losses and parameters of an
// uninterrupted run; the same checkpoint resumes on one process without
// ZeRO-1 (bf16) with the same parameters. Each rank is a child process
// (worker/communication/multiprocess_test_util.h).

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "cost_model/model_spec.h"
#include "gtest/gtest.h"
#include "planner/plan/plan.h"
#include "torch/torch.h"
#include "worker/checkpoint_coordinator.h"
#include "worker/communication/c10d_test_world.h"
#include "worker/communication/communicator.h"
#include "worker/communication/fake_communicator.h"
#include "worker/communication/multiprocess_test_util.h"
#include "worker/execution/checkpoint.h"
#include "worker/execution/equivalence_test_support.h"
#include "worker/execution/model.h"
#include "worker/execution/plan_executor.h"
#include "worker/world_consensus.h"

namespace dcp {
namespace {

constexpr int kWorldSize = 4;
constexpr int kSteps = 4;
constexpr int kCheckpointStep = 2;
constexpr absl::Duration kTimeout = absl::Seconds(30);

SequenceInput SequenceOf(int step, int index) {
  SequenceInput input;
  const int64_t length = ::dcp::testing::EquivalenceSequenceLengths().at(index);
  for (int64_t i = 0; i < length; ++i) {
    input.token_ids.push_back((i * 31 + index * 97 + step * 13 + 5) % 256);
  }
  return input;
}

int64_t TotalLossTokens() {
  int64_t total = 0;
  for (int64_t length : ::dcp::testing::EquivalenceSequenceLengths()) {
    total += length - 1;
  }
  return total;
}

/// A tiny GPT in `settings`' precision and its executor on `communicator`.
struct Trainer {
  Trainer(const CheckpointSettings& settings, Communicator& communicator) {
    GptModelOptions model_options;
    model_options.seed = 77;
    model_options.dtype =
        settings.precision == "bf16" ? torch::kBFloat16 : torch::kFloat32;
    model = *GptModel::Create(*ModelPreset("tiny"), model_options);
    PlanExecutorOptions options;
    options.collective_timeout = kTimeout;
    options.zero1 = settings.zero1;
    // Small buckets: the gather runs in several chunks.
    options.all_reduce_bucket_bytes = 4096;
    executor = std::make_unique<PlanExecutor>(model, communicator, options);
  }

  /// Step `step` under one of the four very different plans (or `plan`).
  absl::StatusOr<double> Step(int step, const Plan* plan = nullptr) {
    absl::StatusOr<Plan> named = ::dcp::testing::EquivalencePlanNamed(
        ::dcp::testing::EquivalencePlanNames()[step % 4]);
    if (!named.ok()) return named.status();
    absl::StatusOr<StepResult> result = executor->RunStep(
        plan != nullptr ? *plan : *named,
        [step](int index) { return SequenceOf(step, index); },
        TotalLossTokens());
    if (!result.ok()) return result.status();
    return result->global_loss;
  }

  CheckpointCoordinatorOptions CheckpointOptions(
      const std::string& dir, const CheckpointSettings& settings) {
    CheckpointCoordinatorOptions options;
    options.dir = dir;
    options.model_name = "tiny";
    options.timeout = kTimeout;
    options.settings = settings;
    options.gather_master = [this](bool keep) {
      return executor->GatherMasterWeightState(keep);
    };
    options.load_master = [this](const MasterWeightState& state) {
      return executor->LoadMasterWeightState(state);
    };
    return options;
  }

  std::shared_ptr<GptModel> model;
  std::unique_ptr<PlanExecutor> executor;
};

absl::Status ExpectSameParameters(GptModel& expected, GptModel& actual,
                                  const std::string& what) {
  std::vector<torch::Tensor> a = expected.parameters();
  std::vector<torch::Tensor> b = actual.parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) {
      return absl::InternalError(
          absl::StrCat(what, ": parameter ", i, " differs"));
    }
  }
  return absl::OkStatus();
}

// context.arg: "bf16" or "fp32" (both with ZeRO-1).
DCP_RANK_MAIN(ResumeMatchesUninterrupted) {
  CheckpointSettings settings;
  settings.precision = context.arg;
  settings.zero1 = true;
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      ::dcp::testing::JoinC10dTestWorld(
          context, absl::StrCat("zero1_checkpoint_", context.arg), kTimeout);
  if (!communicator.ok()) return communicator.status();
  WorldConsensus consensus(**communicator, torch::kCPU);
  const std::string dir = context.scratch_dir + "/checkpoints";
  auto log = [](const std::string& line) { std::printf("%s\n", line.c_str()); };

  Trainer whole(settings, **communicator);
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<double> loss = whole.Step(step);
    if (!loss.ok()) return loss.status();
    losses.push_back(*loss);
  }

  Trainer first(settings, **communicator);
  for (int step = 0; step < kCheckpointStep; ++step) {
    absl::StatusOr<double> loss = first.Step(step);
    if (!loss.ok()) return loss.status();
    if (*loss != losses[step]) {
      return absl::InternalError(absl::StrCat("step ", step, " not repeatable"));
    }
  }
  CheckpointCoordinator writer(first.CheckpointOptions(dir, settings),
                               consensus, *first.model,
                               first.executor->optimizer(), RealClock::Get(),
                               log);
  if (absl::Status status = writer.WriteOnEveryRank(kCheckpointStep);
      !status.ok()) {
    return status;
  }

  Trainer resumed(settings, **communicator);
  CheckpointCoordinator reader(resumed.CheckpointOptions(dir, settings),
                               consensus, *resumed.model,
                               resumed.executor->optimizer(), RealClock::Get(),
                               log);
  absl::StatusOr<std::optional<int64_t>> next = reader.Resume();
  if (!next.ok()) return next.status();
  if (*next != std::optional<int64_t>(kCheckpointStep)) {
    return absl::InternalError("resumed at the wrong step");
  }
  if (absl::Status same =
          ExpectSameParameters(*first.model, *resumed.model, "resumed");
      !same.ok()) {
    return same;
  }
  for (int step = kCheckpointStep; step < kSteps; ++step) {
    absl::StatusOr<double> loss = resumed.Step(step);
    if (!loss.ok()) return loss.status();
    std::printf("[rank %d] %s step %d: resumed loss %.9f, uninterrupted %.9f\n",
                context.rank, context.arg.c_str(), step, *loss, losses[step]);
    if (*loss != losses[step]) {
      return absl::InternalError(
          absl::StrCat("step ", step, " after resuming: loss ", *loss,
                       " but ", losses[step], " uninterrupted"));
    }
  }
  if (absl::Status same =
          ExpectSameParameters(*whole.model, *resumed.model, "after resuming");
      !same.ok()) {
    return same;
  }

  if (settings.precision == "bf16") {
    // The same checkpoint on one process without ZeRO-1: its whole state.
    FakeCommunicator alone;
    CheckpointSettings unsharded = settings;
    unsharded.zero1 = false;
    Trainer single(unsharded, alone);
    WorldConsensus alone_consensus(alone, torch::kCPU);
    CheckpointCoordinator single_reader(
        single.CheckpointOptions(dir, unsharded), alone_consensus,
        *single.model, single.executor->optimizer(), RealClock::Get(), log);
    absl::StatusOr<std::optional<int64_t>> single_next =
        single_reader.Resume();
    if (!single_next.ok()) return single_next.status();
    if (absl::Status same = ExpectSameParameters(
            *first.model, *single.model, "one process without ZeRO-1");
        !same.ok()) {
      return same;
    }
    // And trains on from there.
    const Plan all = ::dcp::testing::SingleProcessPlan();
    absl::StatusOr<double> loss = single.Step(kCheckpointStep, &all);
    if (!loss.ok()) return loss.status();
  }
  return absl::OkStatus();
}

class Zero1CheckpointTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Zero1CheckpointTest, ResumedRunMatchesAnUninterruptedOne) {
  EXPECT_TRUE(::dcp::testing::EveryRankSucceeded(
      kWorldSize, absl::Seconds(120), "ResumeMatchesUninterrupted",
      GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Precisions, Zero1CheckpointTest,
                         ::testing::Values("fp32", "bf16"));

}  // namespace
}  // namespace dcp
