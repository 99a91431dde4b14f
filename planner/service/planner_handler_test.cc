// The handler end to end: registration and request errors, profiles,
// restarts and the state directory. Planning: planner_handler_planning_test;
// reports and refit: planner_handler_stats_test.

#include "planner/service/planner_handler.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fake_clock.h"
#include "common/test_files.h"
#include "cost_model/fitting.h"
#include "dcp/v1/planner_state.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/client/batch_fingerprint.h"
#include "planner/service/planner_handler_test_support.h"
#include "planner/service/step_state_files.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(PlannerHandlerTest, IncompleteWorldSaysWhatIsMissing) {
  FakeClock clock;
  auto handler = MakeHandler(GpuOptions(), clock, nullptr);
  ASSERT_TRUE(handler->RegisterWorker(Worker("w0", "node0", 8)).ok());
  absl::StatusOr<v1::RegisterWorkerResponse> response =
      handler->RegisterWorker(Worker("w1", "node1", 4));
  ASSERT_TRUE(response.ok());
  EXPECT_FALSE(response->world_complete());
  EXPECT_EQ(response->waiting_for(),
            "2 of 4 nodes, 12 of 32 ranks registered; missing node slots 2, "
            "3; node 'node1' (slot 1) has 4 of 8 ranks");
  absl::StatusOr<v1::GetPlanResponse> plan =
      handler->GetPlan(PlanRequest("w0", MakeBatch(0)));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      plan.status().message(),
      AllOf(HasSubstr("12 of 32 ranks"), HasSubstr("missing node slots 2, 3")));
  EXPECT_EQ(handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(0)))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PlannerHandlerTest, RegistrationErrorsNameTheField) {
  FakeClock clock;
  auto handler = MakeHandler(GpuOptions(), clock, nullptr);
  struct Case {
    v1::RegisterWorkerRequest request;
    std::string field;
  };
  std::vector<Case> cases;
  cases.push_back({Worker("", "node0", 8), "worker_id"});
  cases.push_back({Worker("a b", "node0", 8), "worker_id"});
  cases.push_back({Worker(std::string(200, 'w'), "node0", 8), "worker_id"});
  cases.push_back({Worker("w", "", 8), "node_name"});
  cases.push_back({Worker("w", "node/0", 8), "node_name"});
  cases.push_back({Worker("w", "node0", 0), "num_ranks = 0"});
  cases.push_back({Worker("w", "node0", 9), "num_ranks = 9"});
  cases.push_back({Worker("w", "node0", -3), "num_ranks = -3"});
  Case backend{Worker("w", "node0", 8), "backend 'mpi'"};
  backend.request.set_backend("mpi");
  cases.push_back(backend);
  Case memory{Worker("w", "node0", 8), "gpu_memory_bytes = -1"};
  memory.request.set_gpu_memory_bytes(-1);
  cases.push_back(memory);
  for (const char* address :
       {"nohost", ":29500", "host:0", "host:70000", "host:12ab"}) {
    Case bad{Worker("w", "node0", 8), "address"};
    bad.request.set_address(address);
    cases.push_back(bad);
  }
  Case kind{Worker("w", "node0", 8), "gpu_kind"};
  kind.request.set_gpu_kind(std::string(1000, 'k'));
  cases.push_back(kind);
  for (const Case& c : cases) {
    absl::StatusOr<v1::RegisterWorkerResponse> response =
        handler->RegisterWorker(c.request);
    EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument)
        << c.field;
    EXPECT_THAT(response.status().message(), HasSubstr(c.field));
  }
  EXPECT_THAT(handler->ListWorkers({})->workers(), IsEmpty());
  // Empty backend and address, CPU workers and IPv6 addresses are fine.
  v1::RegisterWorkerRequest plain = Worker("w:1.a-b_c", "node0", 8);
  plain.set_backend("");
  plain.set_address("[::1]:29500");
  EXPECT_TRUE(handler->RegisterWorker(plain).ok());
}

TEST(PlannerHandlerTest, PlanRequestErrorsNameTheField) {
  FakeClock clock;
  auto handler = MakeHandler(GpuOptions(), clock, nullptr);
  RegisterWorld(*handler, 4, 8);
  auto expect_invalid = [&](const v1::GetPlanRequest& request,
                            const std::string& text) {
    absl::StatusOr<v1::GetPlanResponse> response = handler->GetPlan(request);
    EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument)
        << text;
    EXPECT_THAT(response.status().message(), HasSubstr(text));
  };
  // A batch without samples is a request by step, which must agree.
  v1::GlobalBatch empty;
  empty.set_step(3);
  expect_invalid(PlanRequest("w0", empty),
                 "batch.samples is empty (step 3) and step = 0");
  expect_invalid(StepRequest("w0", -2), "step = -2; steps are numbered from 0");
  v1::GetPlanRequest two_steps = PlanRequest("w0", MakeBatch(1, 4));
  two_steps.set_step(2);
  expect_invalid(two_steps, "step = 2 but batch.step = 1");
  v1::GetPlanRequest wrong_fingerprint = PlanRequest("w0", MakeBatch(1, 4));
  wrong_fingerprint.set_batch_fingerprint(0x1234);
  expect_invalid(wrong_fingerprint,
                 "batch_fingerprint = 0000000000001234 but the samples sent "
                 "have fingerprint ");
  v1::GlobalBatch negative = MakeBatch(1, 4);
  negative.set_step(-1);
  expect_invalid(PlanRequest("w0", negative), "batch.step = -1");
  v1::GlobalBatch zero = MakeBatch(1, 4);
  zero.mutable_samples(2)->set_length_tokens(0);
  expect_invalid(PlanRequest("w0", zero),
                 "batch.samples[2] (id 1002) has length_tokens = 0");
  v1::GlobalBatch huge = MakeBatch(1, 4);
  huge.mutable_samples(1)->set_length_tokens(int64_t{1} << 50);
  expect_invalid(PlanRequest("w0", huge), "batch.samples[1]");
  v1::GlobalBatch duplicate = MakeBatch(1, 4);
  duplicate.mutable_samples(3)->set_id(1001);
  expect_invalid(PlanRequest("w0", duplicate),
                 "batch.samples[3].id = 1001 repeats batch.samples[1].id");
  expect_invalid(PlanRequest("bad id", MakeBatch(1, 4)), "worker_id");
  absl::StatusOr<v1::GetPlanResponse> unknown =
      handler->GetPlan(PlanRequest("stranger", MakeBatch(1, 4)));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("'stranger'"));
}

TEST(PlannerHandlerTest, TheWorkersDeclaredTrainingStateIsWhatPlansCount) {
  FakeClock clock;
  auto handler = MakeHandler(GpuOptions(), clock, nullptr);
  const v1::GetClusterModelResponse before =
      handler->GetClusterModel({}).value();
  EXPECT_TRUE(before.params().memory().zero1_optimizer_sharding());
  // fp32 workers with a replicated optimizer (what dcp_worker runs by
  // default): the memory model counts 4 + 4 + 8 bytes on every GPU.
  for (int n = 0; n < 4; ++n) {
    v1::RegisterWorkerRequest worker =
        Worker(absl::StrCat("w", n), absl::StrCat("node", n), 8);
    worker.set_precision("fp32");
    worker.set_optimizer_sharding("none");
    ASSERT_TRUE(handler->RegisterWorker(worker).ok());
  }
  const v1::GetClusterModelResponse after =
      handler->GetClusterModel({}).value();
  EXPECT_GT(after.params_version(), before.params_version());
  EXPECT_EQ(after.params().memory().weight_bytes_per_parameter(), 4);
  EXPECT_EQ(after.params().memory().optimizer_bytes_per_parameter(), 8);
  EXPECT_FALSE(after.params().memory().zero1_optimizer_sharding());
  // Plans are priced with it: llama3-8b's fp32 state, replicated, does not
  // fit an H200 (bf16 with ZeRO-1 did), and the refusal counts its bytes.
  absl::StatusOr<v1::GetPlanResponse> plan =
      handler->GetPlan(PlanRequest("w0", MakeBatch(0)));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("4 B weights + 4 B gradients + 8 B optimizer states"));
}

TEST(PlannerHandlerTest, SubmitProfileFitsAndVersionsParameters) {
  FakeClock clock;
  const PlannerHandlerOptions options = GpuOptions();
  auto handler = MakeHandler(options, clock, nullptr);
  RegisterWorld(*handler, 4, 8);
  absl::StatusOr<v1::GetPlanResponse> before =
      handler->GetPlan(PlanRequest("w0", MakeBatch(0)));
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_TRUE(before->using_default_params());
  EXPECT_EQ(before->params_version(), 0);
  v1::GetClusterModelResponse model = handler->GetClusterModel({}).value();
  EXPECT_TRUE(model.using_default_params());
  EXPECT_EQ(model.params_version(), 0);
  EXPECT_EQ(model.model().name(), "llama3-8b");

  absl::StatusOr<v1::SubmitProfileResponse> fitted =
      handler->SubmitProfile(Profile(options, "w0", /*seed=*/1));
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_EQ(fitted->params_version(), 1);
  ASSERT_FALSE(fitted->reports().empty());
  for (const v1::FitReport& report : fitted->reports()) {
    if (report.name() == "gemm" || report.name() == "attention_forward") {
      EXPECT_FALSE(report.used_defaults()) << report.note();
      EXPECT_LT(report.rms_relative_error(), 0.05);
    }
  }
  model = handler->GetClusterModel({}).value();
  EXPECT_FALSE(model.using_default_params());
  EXPECT_EQ(model.params_version(), 1);
  EXPECT_NEAR(model.params().compute().gemm_flops_per_second(), 600e12,
              0.05 * 600e12);
  EXPECT_EQ(model.reports_size(), fitted->reports_size());

  // The same profile again changes nothing.
  EXPECT_EQ(handler->SubmitProfile(Profile(options, "w0", 1))->params_version(),
            1);
  // The same worker re-submitting replaces its samples (version bumps since
  // the noise differs), and another worker's samples are added.
  EXPECT_EQ(handler->SubmitProfile(Profile(options, "w0", 2))->params_version(),
            2);
  EXPECT_EQ(handler->SubmitProfile(Profile(options, "w1", 3))->params_version(),
            3);

  // A new step uses the new parameters; the old step keeps its plan.
  absl::StatusOr<v1::GetPlanResponse> after =
      handler->GetPlan(PlanRequest("w0", MakeBatch(1)));
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->using_default_params());
  EXPECT_EQ(after->params_version(), 3);
  EXPECT_EQ(
      handler->GetPlan(PlanRequest("w1", MakeBatch(0)))->SerializeAsString(),
      before->SerializeAsString());
}

TEST(PlannerHandlerTest, ConcurrentProfilesShareFits) {
  FakeClock clock;
  const PlannerHandlerOptions options = GpuOptions();
  constexpr int kWorkers = 4;
  std::vector<v1::SubmitProfileRequest> profiles;
  for (int w = 0; w < kWorkers; ++w) {
    profiles.push_back(Profile(options, absl::StrCat("w", w), 10 + w));
  }

  // Every worker at once.
  LogLines log;
  auto handler = MakeHandler(options, clock, nullptr, &log);
  RegisterWorld(*handler, kWorkers, 8);
  std::vector<absl::StatusOr<v1::SubmitProfileResponse>> responses(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back(
        [&, w] { responses[w] = handler->SubmitProfile(profiles[w]); });
  }
  for (std::thread& thread : threads) thread.join();
  int64_t newest = 0;
  for (const auto& response : responses) {
    ASSERT_TRUE(response.ok()) << response.status();
    newest = std::max(newest, response->params_version());
  }
  // Every call answered with a fit that covers its profile, and no more
  // fits ran than calls.
  int fits = 0;
  for (const std::string& line : log.lines()) {
    if (absl::StrContains(line, "profiles fitted")) ++fits;
  }
  EXPECT_GE(fits, 1);
  EXPECT_LE(fits, kWorkers);
  const v1::GetClusterModelResponse together =
      handler->GetClusterModel({}).value();
  EXPECT_EQ(together.params_version(), newest);

  // The same profiles one by one end at the same fit (up to the order the
  // samples were summed in).
  auto sequential = MakeHandler(options, clock, nullptr);
  RegisterWorld(*sequential, kWorkers, 8);
  for (const v1::SubmitProfileRequest& profile : profiles) {
    ASSERT_TRUE(sequential->SubmitProfile(profile).ok());
  }
  const v1::GetClusterModelResponse one_by_one =
      sequential->GetClusterModel({}).value();
  EXPECT_NEAR(together.params().compute().gemm_flops_per_second(),
              one_by_one.params().compute().gemm_flops_per_second(),
              1e-9 * one_by_one.params().compute().gemm_flops_per_second());
  EXPECT_NEAR(
      together.params().comm().all_to_all_intra_bus_bytes_per_second(),
      one_by_one.params().comm().all_to_all_intra_bus_bytes_per_second(),
      1e-9 *
          one_by_one.params().comm().all_to_all_intra_bus_bytes_per_second());
}

TEST(PlannerHandlerTest, ProfileErrorsNameTheSample) {
  FakeClock clock;
  const PlannerHandlerOptions options = GpuOptions();
  auto handler = MakeHandler(options, clock, nullptr);
  v1::SubmitProfileRequest empty;
  empty.set_worker_id("w0");
  EXPECT_THAT(handler->SubmitProfile(empty).status().message(),
              HasSubstr("samples is empty"));
  v1::SubmitProfileRequest no_worker = Profile(options, "", 1);
  EXPECT_THAT(handler->SubmitProfile(no_worker).status().message(),
              HasSubstr("worker_id is empty"));
  v1::SubmitProfileRequest unspecified = Profile(options, "w0", 1);
  unspecified.mutable_samples(4)->set_op(v1::ProfileSample::OP_UNSPECIFIED);
  absl::StatusOr<v1::SubmitProfileResponse> response =
      handler->SubmitProfile(unspecified);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(response.status().message(), HasSubstr("samples[4].op"));
  v1::SubmitProfileRequest negative = Profile(options, "w0", 1);
  negative.mutable_samples(6)->set_measured_seconds(-1);
  response = handler->SubmitProfile(negative);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(response.status().message(),
              AllOf(HasSubstr("sample 6"), HasSubstr("measured_seconds")));
  // A valid profile from a worker that never registered adds no slot.
  response = handler->SubmitProfile(Profile(options, "w0", 1));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(response.status().message(),
              HasSubstr("worker_id 'w0' is not registered"));
  EXPECT_EQ(handler->GetClusterModel({})->params_version(), 0);
  ASSERT_TRUE(handler->RegisterWorker(Worker("w0", "node0", 8)).ok());
  EXPECT_EQ(handler->SubmitProfile(Profile(options, "w0", 1))->params_version(),
            1);
}

// A planner over a fresh state directory: each handler made with `options`
// restarts it, reading what the ones before wrote.
class PlannerHandlerRestartTest : public ::testing::Test {
 protected:
  PlannerHandlerRestartTest() { options.state_dir = directory; }

  // Starts a planner over the directory, which claims it for its job.
  void ClaimDirectory() {
    auto started = MakeHandler(options, clock, nullptr);
    ASSERT_NE(started, nullptr);
    ASSERT_TRUE(started->RecordJob().ok());
  }

  const std::string directory = FreshTestDirectory("planner_handler_");
  FakeClock clock;
  PlannerHandlerOptions options = GpuOptions();
};

// A step planned on demand (no background threads) has its plan record
// written off the call, by the handler's writer: it is there once the
// handler shuts down, and a restarted planner still has it.
TEST_F(PlannerHandlerRestartTest,
       OnDemandPlanRecordIsWrittenAndSurvivesARestart) {
  std::string served;
  {
    RecordingMetrics metrics;
    auto handler = MakeHandler(options, clock, &metrics);
    RegisterWorld(*handler, 4, 8);
    absl::StatusOr<v1::GetPlanResponse> plan =
        handler->GetPlan(PlanRequest("w0", MakeBatch(5)));
    ASSERT_TRUE(plan.ok()) << plan.status();
    served = plan->plan().SerializeAsString();
    handler->Shutdown();
    absl::StatusOr<RecordedStep> recorded = ReadRecordedStep(directory, 5);
    ASSERT_TRUE(recorded.ok()) << recorded.status();
    EXPECT_EQ(recorded->plan.plan().SerializeAsString(), served);
  }
  RecordingMetrics metrics;
  auto restarted = MakeHandler(options, clock, &metrics);
  absl::StatusOr<RecordedStep> recorded = ReadRecordedStep(directory, 5);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_EQ(recorded->plan.plan().SerializeAsString(), served);
}

TEST_F(PlannerHandlerRestartTest, RestartServesIdenticalPlansAndKeepsState) {
  std::vector<std::string> before;
  {
    RecordingMetrics metrics;
    auto handler = MakeHandler(options, clock, &metrics);
    RegisterWorld(*handler, 4, 8);
    before.push_back(
        *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(0))).value());
    ASSERT_EQ(
        handler->SubmitProfile(Profile(options, "w0", 1))->params_version(), 1);
    before.push_back(
        *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(1))).value());
    before.push_back(
        *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(2))).value());
    EXPECT_EQ(metrics.plans_computed(), 3);
  }
  RecordingMetrics metrics;
  auto handler = MakeHandler(options, clock, &metrics);
  EXPECT_EQ(metrics.registered_workers(), 4);
  v1::ListWorkersResponse workers = handler->ListWorkers({}).value();
  EXPECT_TRUE(workers.world_complete());
  ASSERT_EQ(workers.workers_size(), 4);
  EXPECT_EQ(workers.workers(3).first_rank(), 24);
  EXPECT_EQ(workers.workers(3).address(), "node3:29500");
  EXPECT_EQ(handler->RegisterWorker(Worker("w2", "node2", 8))->first_rank(),
            16);
  v1::GetClusterModelResponse model = handler->GetClusterModel({}).value();
  EXPECT_EQ(model.params_version(), 1);
  EXPECT_FALSE(model.using_default_params());
  EXPECT_EQ(model.reports_size(), 15);  // One per sub-model.
  // Earlier steps come back byte for byte, planned with their recorded
  // parameter versions (step 0 with the defaults).
  for (int64_t step = 0; step < 3; ++step) {
    EXPECT_EQ(
        *handler->GetSerializedPlan(PlanRequest("w1", MakeBatch(step))).value(),
        before[step])
        << step;
  }
  EXPECT_EQ(metrics.plans_computed(), 3);
  EXPECT_TRUE(handler->GetPlan(PlanRequest("w1", MakeBatch(0)))
                  ->using_default_params());
  // The recorded fingerprints still guard the steps.
  EXPECT_EQ(handler->GetPlan(PlanRequest("w1", MakeBatch(2, 48, /*salt=*/1)))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // Profiles survive too: the same profile from w0 is no change.
  EXPECT_EQ(handler->SubmitProfile(Profile(options, "w0", 1))->params_version(),
            1);
}

// A garbled record of a planned step used to stop the planner from
// restarting; now the record is set aside with one log line naming it, and
// the step is planned again.
TEST_F(PlannerHandlerRestartTest, RestartSetsAsideACorruptStepRecord) {
  std::string step_1;
  {
    auto handler = MakeHandler(options, clock, nullptr);
    RegisterWorld(*handler, 4, 8);
    ASSERT_TRUE(handler->GetPlan(PlanRequest("w0", MakeBatch(0))).ok());
    step_1 =
        *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(1))).value();
  }
  const std::string garbled =
      absl::StrCat(directory, "/", StepFileName(kStepRecordPrefix, 0));
  WriteTestFile(garbled, "\x0a\xff");
  RecordingMetrics metrics;
  LogLines log;
  auto handler = MakeHandler(options, clock, &metrics, &log);
  ASSERT_NE(handler, nullptr);
  std::vector<std::string> lines;
  for (const std::string& line : log.lines()) {
    if (absl::StrContains(line, garbled)) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 1u) << absl::StrJoin(log.lines(), "\n");
  EXPECT_THAT(lines[0], AllOf(HasSubstr("does not parse as a step record"),
                              HasSubstr(".corrupt")));
  // Step 0 no longer claims its batch: it is planned again, for any batch.
  // Step 1's record was kept: it still guards its batch.
  EXPECT_TRUE(
      handler->GetPlan(PlanRequest("w1", MakeBatch(0, 48, /*salt=*/1))).ok());
  EXPECT_EQ(handler->GetPlan(PlanRequest("w1", MakeBatch(1, 48, /*salt=*/1)))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      *handler->GetSerializedPlan(PlanRequest("w1", MakeBatch(1))).value(),
      step_1);
}

TEST_F(PlannerHandlerRestartTest, RestartWithAnotherJobIsRefused) {
  ASSERT_NO_FATAL_FAILURE(ClaimDirectory());
  PlannerHandlerOptions other_cluster = options;
  other_cluster.cluster.num_nodes = 2;
  absl::StatusOr<std::unique_ptr<PlannerHandler>> another_job =
      PlannerHandler::Create(other_cluster, clock, nullptr, nullptr);
  EXPECT_EQ(another_job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(another_job.status().message(), HasSubstr("different job"));

  // Planner options decide plans too.
  PlannerHandlerOptions other = options;
  other.planner_options.sp_sizes = {1, 2};
  absl::StatusOr<std::unique_ptr<PlannerHandler>> refused =
      PlannerHandler::Create(other, clock, nullptr, nullptr);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("different job (its model, cluster or planner "
                        "options differ"));

  // The job is recorded as a typed record; a directory of the earlier JSON
  // format (job.json) is refused with what to do.
  EXPECT_TRUE(std::filesystem::exists(directory + "/job.pb"));
  const std::string legacy = directory + "_json";
  std::filesystem::create_directories(legacy);
  WriteTestFile(legacy + "/job.json", "{}");
  PlannerHandlerOptions old_format = options;
  old_format.state_dir = legacy;
  absl::StatusOr<std::unique_ptr<PlannerHandler>> old_refused =
      PlannerHandler::Create(old_format, clock, nullptr, nullptr);
  EXPECT_EQ(old_refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      old_refused.status().message(),
      AllOf(HasSubstr("JSON state files"), HasSubstr("fresh state_dir")));
  EXPECT_TRUE(PlannerHandler::Create(options, clock, nullptr, nullptr).ok());
  EXPECT_EQ(
      PlannerHandler::Create(other, clock, nullptr, nullptr).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST_F(PlannerHandlerRestartTest, AfterRestartStepsByStepNeedTheirBatch) {
  std::string before;
  {
    auto handler = MakeHandler(options, clock, nullptr);
    RegisterWorld(*handler, 4, 8);
    before =
        *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(0))).value();
  }
  RecordingMetrics metrics;
  auto handler = MakeHandler(options, clock, &metrics);
  EXPECT_THAT(handler->GetPlan(StepRequest("w0", 0)).status().message(),
              HasSubstr("planned before the planner restarted"));
  EXPECT_EQ(
      handler
          ->GetPlan(StepRequest("w0", 0, BatchFingerprint(MakeBatch(0, 48, 1))))
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      *handler->GetSerializedPlan(PlanRequest("w1", MakeBatch(0))).value(),
      before);
  // By fingerprint: the same plan, without the sample ids.
  v1::GetPlanResponse by_fingerprint;
  ASSERT_TRUE(by_fingerprint.ParseFromString(
      *handler
           ->GetSerializedPlan(
               StepRequest("w2", 0, BatchFingerprint(MakeBatch(0))))
           .value()));
  v1::GetPlanResponse expected;
  ASSERT_TRUE(expected.ParseFromString(before));
  expected.clear_sample_ids();
  EXPECT_EQ(by_fingerprint.SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(metrics.plans_computed(), 1);
}

TEST_F(PlannerHandlerRestartTest, StateWithOtherFingerprintVersionIsRefused) {
  ASSERT_NO_FATAL_FAILURE(ClaimDirectory());
  const std::string path = absl::StrCat(directory, "/job.pb");
  v1::JobRecord job;
  ASSERT_TRUE(job.ParseFromString(ReadTestFile(path)));
  ASSERT_EQ(job.batch_fingerprint_version(), kBatchFingerprintVersion);
  // A directory of the byte-wise FNV-1a planner (version 1).
  job.set_batch_fingerprint_version(1);
  std::string bytes;
  ASSERT_TRUE(job.SerializeToString(&bytes));
  WriteTestFile(path, bytes);
  absl::StatusOr<std::unique_ptr<PlannerHandler>> reopened =
      PlannerHandler::Create(options, clock, nullptr, nullptr);
  EXPECT_EQ(reopened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reopened.status().message(),
              AllOf(HasSubstr("batch fingerprints of version 1"),
                    HasSubstr(absl::StrCat("computes version ",
                                           kBatchFingerprintVersion)),
                    HasSubstr("fresh state_dir")));
}

TEST_F(PlannerHandlerRestartTest,
       RegistrationsAreRecordedOnlyWithAStateDirectory) {
  {
    auto handler = MakeHandler(GpuOptions(), clock, nullptr);
    RegisterWorld(*handler, 4, 8);
  }
  EXPECT_FALSE(std::filesystem::exists(directory));
  {
    auto handler = MakeHandler(options, clock, nullptr);
    RegisterWorld(*handler, 3, 8);
    v1::RegisterWorkerRequest moved = Worker("w1", "node1", 8);
    moved.set_address("10.1.1.1:29500");
    ASSERT_TRUE(handler->RegisterWorker(moved).ok());
  }
  auto handler = MakeHandler(options, clock, nullptr);
  v1::ListWorkersResponse workers = handler->ListWorkers({}).value();
  ASSERT_EQ(workers.workers_size(), 3);
  EXPECT_EQ(workers.workers(1).address(), "10.1.1.1:29500");
  EXPECT_EQ(workers.workers(2).first_rank(), 16);
  EXPECT_EQ(handler->RegisterWorker(Worker("w3", "node3", 8))->first_rank(),
            24);
}

}  // namespace
}  // namespace dcp
