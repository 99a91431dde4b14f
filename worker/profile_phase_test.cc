// RunProfilePhase in a world of one against a FakePlannerClient.

#include "worker/profile_phase.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/memory_model.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/client/fake_planner_client.h"
#include "planner/client/proto_convert.h"
#include "torch/torch.h"
#include "worker/communication/fake_communicator.h"
#include "worker/one_rank_planner_answers.h"

namespace dcp {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

/// A planner whose cost model uses default parameters or fitted ones
/// (version 2), with a fit report of each kind.
void ProgramPlanner(FakePlannerClient& planner, bool fitted) {
  planner.get_cluster_model.answer = [fitted](const v1::GetClusterModelRequest&)
      -> absl::StatusOr<v1::GetClusterModelResponse> {
    v1::GetClusterModelResponse response =
        TinyClusterModel(/*using_default_params=*/!fitted,
                         /*params_version=*/2);
    ModelFitReport memory;
    memory.name = "memory";
    memory.used_defaults = true;
    memory.note = "no samples on the CPU";
    *response.add_reports() = FitReportToProto(memory);
    return response;
  };
  planner.submit_profile.answer = [](const v1::SubmitProfileRequest&)
      -> absl::StatusOr<v1::SubmitProfileResponse> {
    return v1::SubmitProfileResponse();
  };
}

struct Fixture {
  Fixture() : consensus(communicator, torch::kCPU) {
    options.worker_id = "worker-a";
    options.profile.repeats = 1;
    options.profile.warmup = 0;
    options.profile.gemm_tokens = {8};
    options.profile.attention_lengths = {16};
    options.profile.memory_tokens = {256, 512};
    options.profile.memory_sequence_tokens = 128;
    options.profile.memory_checkpointed_layers = std::vector<int>{0, 2};
    options.log = [this](const std::string& line) { logged.push_back(line); };
    options.print = [this](const std::string& line) {
      printed.push_back(line);
    };
  }
  absl::Status Run() {
    return RunProfilePhase(planner, *ModelPreset("tiny"), communicator,
                           consensus, options, RealClock::Get());
  }

  FakePlannerClient planner;
  FakeCommunicator communicator;
  WorldConsensus consensus;
  ProfilePhaseOptions options;
  std::vector<std::string> logged;
  std::vector<std::string> printed;
};

TEST(ProfilePhaseTest, ProfilesSubmitsAndPrintsTheFit) {
  Fixture fixture;
  ProgramPlanner(fixture.planner, /*fitted=*/false);
  ASSERT_TRUE(fixture.Run().ok());
  ASSERT_THAT(fixture.planner.submit_profile.requests(), SizeIs(1));
  const v1::SubmitProfileRequest submitted =
      fixture.planner.submit_profile.requests()[0];
  EXPECT_EQ(submitted.worker_id(), "worker-a");
  // One GEMM, an attention forward and backward, and activation memory at
  // two token counts and two recompute settings.
  EXPECT_EQ(submitted.samples_size(), 7);
  // The memory samples carry the model state the planner's memory model
  // assumes (its parameters, from GetClusterModel), so that its fit sees
  // the measured activations on top.
  // (The fake planner answers for a Gloo world: no communicator bytes.)
  const double planned_static_bytes =
      MemoryModel(
          *ModelPreset("tiny"),
          MemoryParamsFromProto(TinyClusterModel(/*using_default_params=*/true,
                                                 /*params_version=*/0)
                                    .params()
                                    .memory()),
          /*world_size=*/1)
          .StaticBytes();
  int memory_samples = 0;
  for (const v1::ProfileSample& sample : submitted.samples()) {
    if (sample.op() != v1::ProfileSample::ACTIVATION_MEMORY) continue;
    ++memory_samples;
    EXPECT_GT(static_cast<double>(sample.measured_bytes()),
              planned_static_bytes);
  }
  EXPECT_EQ(memory_samples, 4);
  EXPECT_THAT(
      fixture.printed,
      ElementsAre("profile: 1 ranks submitted their samples; cost model "
                  "params v2",
                  "  fit gemm: 4 samples, rms error 5.0%, max 10.0%",
                  "  fit memory: defaults kept (0 samples; no samples on the "
                  "CPU)"));
  EXPECT_THAT(fixture.logged, Contains(HasSubstr("profiled 7 samples in ")));
}

TEST(ProfilePhaseTest, FittedParametersAreNotProfiledAgain) {
  Fixture fixture;
  ProgramPlanner(fixture.planner, /*fitted=*/true);
  ASSERT_TRUE(fixture.Run().ok());
  EXPECT_THAT(fixture.planner.submit_profile.requests(), IsEmpty());
  EXPECT_THAT(fixture.printed, IsEmpty());
  EXPECT_THAT(fixture.logged,
              Contains(HasSubstr("already has fitted parameters (v2)")));
  // The agreement still ran: other ranks may have wanted a profile.
  EXPECT_EQ(fixture.communicator.world().all_reduce_calls, 1);
  EXPECT_EQ(fixture.communicator.world().barrier_calls, 0);
}

TEST(ProfilePhaseTest, NotWantedAsksThePlannerNothing) {
  Fixture fixture;
  fixture.options.wanted = false;
  ASSERT_TRUE(fixture.Run().ok());
  EXPECT_THAT(fixture.planner.get_cluster_model.requests(), IsEmpty());
  EXPECT_THAT(fixture.planner.submit_profile.requests(), IsEmpty());
}

TEST(ProfilePhaseTest, AFailedSubmissionSaysSo) {
  Fixture fixture;
  ProgramPlanner(fixture.planner, /*fitted=*/false);
  fixture.planner.submit_profile.answer = [](const v1::SubmitProfileRequest&)
      -> absl::StatusOr<v1::SubmitProfileResponse> {
    return absl::UnavailableError("planner restarting");
  };
  const absl::Status status = fixture.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(),
              HasSubstr("submitting the profile to the planner"));
}

}  // namespace
}  // namespace dcp
