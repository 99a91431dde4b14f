#include "planner/service/planner_handler.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/fake_clock.h"
#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "dcp/v1/planner_state.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/service/batch_fingerprint.h"
#include "planner/service/planner_metrics.h"
#include "planner/service/proto_convert.h"
#include "planner/service/test_directory.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// What PlannerMetrics::PlanShape reports of one plan.
struct PlanShapeReport {
  std::map<int, int> groups_by_sp_size;
  int micro_batches = 0;
  double mean_checkpointed_layers = 0;
  int max_checkpointed_layers = 0;
};

// The PlanShapeReport a plan should produce, computed from its proto.
PlanShapeReport ShapeOf(const v1::Plan& plan) {
  PlanShapeReport shape;
  int64_t checkpointed_sum = 0;
  for (const v1::Group& group : plan.groups()) {
    ++shape.groups_by_sp_size[group.sp_size()];
    for (const v1::MicroBatch& micro_batch : group.micro_batches()) {
      ++shape.micro_batches;
      checkpointed_sum += micro_batch.checkpointed_layers();
      shape.max_checkpointed_layers = std::max(
          shape.max_checkpointed_layers, micro_batch.checkpointed_layers());
    }
  }
  if (shape.micro_batches > 0) {
    shape.mean_checkpointed_layers =
        static_cast<double>(checkpointed_sum) / shape.micro_batches;
  }
  return shape;
}

// Records what the handler reports. Thread-safe.
class RecordingMetrics final : public PlannerMetrics {
 public:
  void PlanComputed(double latency_seconds,
                    double predicted_step_seconds) override {
    absl::MutexLock lock(&mu_);
    ++plans_computed_;
    predicted_.push_back(predicted_step_seconds);
    (void)latency_seconds;
  }
  void PlanShape(const std::map<int, int>& groups_by_sp_size, int micro_batches,
                 double mean_checkpointed_layers,
                 int max_checkpointed_layers) override {
    absl::MutexLock lock(&mu_);
    shapes_.push_back({groups_by_sp_size, micro_batches,
                       mean_checkpointed_layers, max_checkpointed_layers});
  }
  void StepMeasured(int rank, double seconds) override {
    absl::MutexLock lock(&mu_);
    measured_.push_back({rank, seconds});
  }
  void StepImbalance(double imbalance) override {
    absl::MutexLock lock(&mu_);
    imbalances_.push_back(imbalance);
  }
  void CostModelError(double relative_error) override {
    absl::MutexLock lock(&mu_);
    errors_.push_back(relative_error);
  }
  void RegisteredWorkers(int workers) override {
    absl::MutexLock lock(&mu_);
    registered_workers_ = workers;
  }

  int plans_computed() const {
    absl::MutexLock lock(&mu_);
    return plans_computed_;
  }
  std::vector<std::pair<int, double>> measured() const {
    absl::MutexLock lock(&mu_);
    return measured_;
  }
  std::vector<double> imbalances() const {
    absl::MutexLock lock(&mu_);
    return imbalances_;
  }
  std::vector<double> errors() const {
    absl::MutexLock lock(&mu_);
    return errors_;
  }
  int registered_workers() const {
    absl::MutexLock lock(&mu_);
    return registered_workers_;
  }
  std::vector<PlanShapeReport> shapes() const {
    absl::MutexLock lock(&mu_);
    return shapes_;
  }

 private:
  mutable absl::Mutex mu_;
  int plans_computed_ = 0;
  std::vector<double> predicted_;
  std::vector<PlanShapeReport> shapes_;
  std::vector<std::pair<int, double>> measured_;
  std::vector<double> imbalances_;
  std::vector<double> errors_;
  int registered_workers_ = 0;
};

// Collects log lines. Thread-safe.
class LogLines {
 public:
  std::function<void(const std::string&)> Sink() {
    return [this](const std::string& line) {
      absl::MutexLock lock(&mu_);
      lines_.push_back(line);
    };
  }
  std::vector<std::string> lines() const {
    absl::MutexLock lock(&mu_);
    return lines_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> lines_;
};

// llama3-8b on 4 nodes x 8 GPUs.
PlannerHandlerOptions GpuOptions() {
  PlannerHandlerOptions options;
  options.model = ModelPreset("llama3-8b").value();
  options.cluster = H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/8);
  options.background_planning_threads = 0;
  return options;
}

// The tiny model on 4 nodes x 1 rank (the CPU demo's shape).
PlannerHandlerOptions CpuOptions() {
  PlannerHandlerOptions options;
  options.model = ModelPreset("tiny").value();
  options.cluster = H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/1);
  options.background_planning_threads = 0;
  return options;
}

v1::RegisterWorkerRequest Worker(const std::string& id, const std::string& node,
                                 int num_ranks) {
  v1::RegisterWorkerRequest request;
  request.set_worker_id(id);
  request.set_node_name(node);
  request.set_num_ranks(num_ranks);
  request.set_gpu_kind("H200");
  request.set_address(absl::StrCat(node, ":29500"));
  request.set_backend("nccl");
  request.set_libtorch_version("2.4.0");
  return request;
}

// Registers `nodes` nodes of one worker each holding every GPU of its node.
void RegisterWorld(PlannerHandler& handler, int nodes, int ranks_per_node) {
  for (int n = 0; n < nodes; ++n) {
    ASSERT_TRUE(
        handler
            .RegisterWorker(Worker(absl::StrCat("w", n),
                                   absl::StrCat("node", n), ranks_per_node))
            .ok());
  }
}

// A deterministic batch of `n` sequences (1k..16k tokens, a few long).
v1::GlobalBatch MakeBatch(int64_t step, int n = 48, int64_t salt = 0) {
  v1::GlobalBatch batch;
  batch.set_step(step);
  for (int i = 0; i < n; ++i) {
    v1::Sample* sample = batch.add_samples();
    sample->set_id(1000 * step + i);
    sample->set_length_tokens(1000 +
                              ((i + 7 * step + salt) * 2654435761LL) % 15000 +
                              (i % 16 == 0 ? 40000 : 0));
  }
  return batch;
}

v1::GetPlanRequest PlanRequest(const std::string& worker,
                               const v1::GlobalBatch& batch) {
  v1::GetPlanRequest request;
  request.set_worker_id(worker);
  *request.mutable_batch() = batch;
  return request;
}

std::unique_ptr<PlannerHandler> MakeHandler(PlannerHandlerOptions options,
                                            const Clock& clock,
                                            PlannerMetrics* metrics,
                                            LogLines* log = nullptr) {
  std::function<void(const std::string&)> sink;
  if (log != nullptr) {
    sink = log->Sink();
  } else if (std::getenv("DCP_TEST_LOG") != nullptr) {
    sink = [](const std::string& line) { std::cerr << line << "\n"; };
  }
  auto handler =
      PlannerHandler::Create(std::move(options), clock, metrics, sink);
  EXPECT_TRUE(handler.ok()) << handler.status();
  return handler.ok() ? *std::move(handler) : nullptr;
}

// Profile samples from a "real" cluster unlike the defaults.
v1::SubmitProfileRequest Profile(const PlannerHandlerOptions& options,
                                 const std::string& worker, uint64_t seed) {
  CostParams truth = DefaultCostParams(options.model, options.cluster);
  truth.compute.gemm_flops_per_second = 600e12;
  truth.compute.gemm_half_efficiency_tokens = 400;
  truth.compute.attention_forward_flops_per_second *= 0.8;
  truth.compute.attention_backward_flops_per_second *= 0.8;
  truth.comm.all_to_all_intra_bus_bytes_per_second /= 2;
  const CostModel model =
      CostModel::Create(options.model, options.cluster, truth).value();
  v1::SubmitProfileRequest request;
  request.set_worker_id(worker);
  for (const ProfileSample& sample :
       SyntheticProfile(model, seed, /*relative_noise=*/0.01)) {
    *request.add_samples() = ProfileSampleToProto(sample);
  }
  return request;
}

TEST(PlannerHandlerTest, RegistersWorldWithStableContiguousRanks) {
  FakeClock clock;
  RecordingMetrics metrics;
  auto handler = MakeHandler(GpuOptions(), clock, &metrics);
  for (int n = 0; n < 4; ++n) {
    absl::StatusOr<v1::RegisterWorkerResponse> response =
        handler->RegisterWorker(
            Worker(absl::StrCat("w", n), absl::StrCat("node", n), 8));
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->first_rank(), 8 * n);
    EXPECT_EQ(response->num_ranks(), 8);
    EXPECT_EQ(response->node_index(), n);
    EXPECT_EQ(response->world_size(), 32);
    EXPECT_EQ(response->world_complete(), n == 3);
    EXPECT_EQ(response->waiting_for().empty(), n == 3);
    EXPECT_EQ(response->rendezvous_address(), "node0:29500");
    EXPECT_EQ(response->model().name(), "llama3-8b");
    EXPECT_EQ(response->cluster().num_nodes(), 4);
    EXPECT_EQ(response->cluster().gpus_per_node(), 8);
  }
  EXPECT_EQ(metrics.registered_workers(), 4);
  // Re-registering (e.g. after a pod restart with a new address) keeps the
  // ranks.
  v1::RegisterWorkerRequest again = Worker("w2", "node2", 8);
  again.set_address("10.0.0.9:29500");
  absl::StatusOr<v1::RegisterWorkerResponse> response =
      handler->RegisterWorker(again);
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->first_rank(), 16);
  EXPECT_EQ(response->node_index(), 2);
  EXPECT_TRUE(response->world_complete());
  // A changed node or rank count is refused, saying why.
  absl::StatusOr<v1::RegisterWorkerResponse> moved =
      handler->RegisterWorker(Worker("w2", "node5", 8));
  EXPECT_EQ(moved.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      moved.status().message(),
      AllOf(HasSubstr("'w2'"), HasSubstr("'node2'"), HasSubstr("'node5'")));
  absl::StatusOr<v1::RegisterWorkerResponse> resized =
      handler->RegisterWorker(Worker("w2", "node2", 4));
  EXPECT_EQ(resized.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(resized.status().message(), HasSubstr("with 4"));
}

TEST(PlannerHandlerTest, WorkersOfOneNodeGetConsecutiveRanks) {
  FakeClock clock;
  auto handler = MakeHandler(GpuOptions(), clock, nullptr);
  EXPECT_EQ(handler->RegisterWorker(Worker("a", "node0", 4))->first_rank(), 0);
  EXPECT_EQ(handler->RegisterWorker(Worker("b", "node1", 2))->first_rank(), 8);
  EXPECT_EQ(handler->RegisterWorker(Worker("c", "node0", 4))->first_rank(), 4);
  EXPECT_EQ(handler->RegisterWorker(Worker("d", "node1", 6))->first_rank(), 10);
  EXPECT_EQ(handler->RegisterWorker(Worker("a", "node0", 4))->first_rank(), 0);
  // node0 is full.
  absl::StatusOr<v1::RegisterWorkerResponse> full =
      handler->RegisterWorker(Worker("e", "node0", 1));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.status().message(),
              AllOf(HasSubstr("'node0'"), HasSubstr("8 of its 8"),
                    HasSubstr("'a'"), HasSubstr("'c'")));
  ASSERT_TRUE(handler->RegisterWorker(Worker("f", "node2", 8)).ok());
  ASSERT_TRUE(handler->RegisterWorker(Worker("g", "node3", 8)).ok());
  // A fifth node does not fit a 4-node cluster.
  absl::StatusOr<v1::RegisterWorkerResponse> extra =
      handler->RegisterWorker(Worker("h", "node4", 8));
  EXPECT_EQ(extra.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(extra.status().message(),
              AllOf(HasSubstr("'node4'"), HasSubstr("all 4 node slots")));
  // A worker with another backend is refused.
  v1::RegisterWorkerRequest gloo = Worker("b", "node1", 2);
  gloo.set_backend("gloo");
  EXPECT_EQ(handler->RegisterWorker(gloo).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::ListWorkersResponse workers = handler->ListWorkers({}).value();
  EXPECT_TRUE(workers.world_complete());
  ASSERT_EQ(workers.workers_size(), 6);
  std::vector<std::string> order;
  for (const v1::WorkerInfo& info : workers.workers()) {
    order.push_back(info.worker_id());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a", "c", "b", "d", "f", "g"}));
}

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
  v1::GetPlanRequest negative_step;
  negative_step.set_worker_id("w0");
  negative_step.set_step(-2);
  expect_invalid(negative_step, "step = -2; steps are numbered from 0");
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

TEST(PlannerHandlerTest, EachStepIsPlannedOnceEvenUnderConcurrency) {
  FakeClock clock;
  RecordingMetrics metrics;
  LogLines log;
  auto handler = MakeHandler(GpuOptions(), clock, &metrics, &log);
  RegisterWorld(*handler, 4, 8);
  for (int64_t step = 0; step < 3; ++step) {
    const v1::GlobalBatch batch = MakeBatch(step);
    std::vector<std::string> serialized(16);
    std::vector<std::shared_ptr<const std::string>> shared(16);
    std::vector<std::thread> threads;
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([&, t] {
        const v1::GetPlanRequest request =
            PlanRequest(absl::StrCat("w", t % 4), batch);
        if (t % 2 == 0) {
          absl::StatusOr<v1::GetPlanResponse> response =
              handler->GetPlan(request);
          ASSERT_TRUE(response.ok()) << response.status();
          serialized[t] = response->SerializeAsString();
        } else {
          absl::StatusOr<std::shared_ptr<const std::string>> bytes =
              handler->GetSerializedPlan(request);
          ASSERT_TRUE(bytes.ok()) << bytes.status();
          shared[t] = *bytes;
          serialized[t] = **bytes;
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(metrics.plans_computed(), step + 1);
    for (int t = 1; t < 16; ++t) EXPECT_EQ(serialized[t], serialized[0]);
    // Every serialized caller shares one buffer.
    for (int t = 3; t < 16; t += 2) EXPECT_EQ(shared[t], shared[1]);
    v1::GetPlanResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(serialized[1]));
    EXPECT_EQ(parsed.plan().step(), step);
    ASSERT_EQ(parsed.sample_ids_size(), batch.samples_size());
    EXPECT_EQ(parsed.sample_ids(5), batch.samples(5).id());
    int ranks = 0;
    for (const v1::Group& group : parsed.plan().groups()) {
      ranks += group.ranks_size();
      EXPECT_EQ(group.sp_size(), group.ranks_size());
    }
    EXPECT_EQ(ranks, 32);
    // The plan's shape is reported once, as the served plan has it.
    const std::vector<PlanShapeReport> shapes = metrics.shapes();
    ASSERT_EQ(shapes.size(), static_cast<size_t>(step + 1));
    const PlanShapeReport expected = ShapeOf(parsed.plan());
    EXPECT_EQ(shapes.back().groups_by_sp_size, expected.groups_by_sp_size);
    EXPECT_GT(shapes.back().micro_batches, 0);
    EXPECT_EQ(shapes.back().micro_batches, expected.micro_batches);
    EXPECT_DOUBLE_EQ(shapes.back().mean_checkpointed_layers,
                     expected.mean_checkpointed_layers);
    EXPECT_EQ(shapes.back().max_checkpointed_layers,
              expected.max_checkpointed_layers);
    EXPECT_GT(parsed.plan().predicted_step_seconds(), 0);
    EXPECT_GT(parsed.plan().lower_bound_seconds(), 0);
    EXPECT_LE(parsed.plan().lower_bound_seconds(),
              parsed.plan().predicted_step_seconds() * (1 + 1e-9));
  }
  // One log line per planned step, in the documented form.
  int step_lines = 0;
  for (const std::string& line : log.lines()) {
    if (line.rfind("step ", 0) != 0) continue;
    ++step_lines;
    EXPECT_THAT(line, AllOf(HasSubstr(": SP sizes "), HasSubstr("x"),
                            HasSubstr(" micro-batches, predicted "),
                            HasSubstr(" s, lower bound "), HasSubstr("(gap "),
                            HasSubstr("%), planned in 0.0 ms")));
  }
  EXPECT_EQ(step_lines, 3);
}

TEST(PlannerHandlerTest, StepWithADifferentBatchIsRejected) {
  FakeClock clock;
  auto handler = MakeHandler(GpuOptions(), clock, nullptr);
  RegisterWorld(*handler, 4, 8);
  ASSERT_TRUE(handler->GetPlan(PlanRequest("w0", MakeBatch(5))).ok());
  v1::GlobalBatch changed = MakeBatch(5);
  changed.mutable_samples(0)->set_length_tokens(77);
  absl::StatusOr<v1::GetPlanResponse> response =
      handler->GetPlan(PlanRequest("w1", changed));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(response.status().message(),
              AllOf(HasSubstr("step 5 was submitted or planned with a "
                              "different batch (fingerprint "),
                    HasSubstr("a step's batch must not change")));
  v1::SubmitBatchesRequest submit;
  *submit.add_batches() = changed;
  EXPECT_EQ(handler->SubmitBatches(submit).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PlannerHandlerTest, RestartServesIdenticalPlansAndKeepsState) {
  const std::string directory = FreshTestDirectory("planner_handler_");
  FakeClock clock;
  PlannerHandlerOptions options = GpuOptions();
  options.state_dir = directory;
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
  EXPECT_EQ(model.reports_size(), 8);
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

TEST(PlannerHandlerTest, RestartWithAnotherJobIsRefused) {
  const std::string directory = FreshTestDirectory("planner_handler_");
  FakeClock clock;
  PlannerHandlerOptions options = GpuOptions();
  options.state_dir = directory;
  ASSERT_NE(MakeHandler(options, clock, nullptr), nullptr);
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
  { std::ofstream(legacy + "/job.json") << "{}"; }
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

TEST(PlannerHandlerTest, SubmittedBatchesArePlannedAhead) {
  FakeClock clock;
  RecordingMetrics metrics;
  PlannerHandlerOptions options = GpuOptions();
  options.background_planning_threads = 2;
  auto handler = MakeHandler(options, clock, &metrics);
  RegisterWorld(*handler, 4, 8);
  v1::SubmitBatchesRequest submit;
  for (int64_t step = 10; step < 13; ++step)
    *submit.add_batches() = MakeBatch(step);
  *submit.add_batches() = MakeBatch(10);  // repeats are harmless
  absl::StatusOr<v1::SubmitBatchesResponse> accepted =
      handler->SubmitBatches(submit);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_EQ(accepted->accepted(), 4);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (metrics.plans_computed() < 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(metrics.plans_computed(), 3);
  for (int64_t step = 10; step < 13; ++step) {
    absl::StatusOr<v1::GetPlanResponse> plan =
        handler->GetPlan(PlanRequest("w0", MakeBatch(step)));
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->plan().step(), step);
  }
  EXPECT_EQ(metrics.plans_computed(), 3);
  // Invalid batches name their index.
  v1::SubmitBatchesRequest bad;
  *bad.add_batches() = MakeBatch(20);
  *bad.add_batches() = MakeBatch(21);
  bad.mutable_batches(1)->mutable_samples(0)->set_length_tokens(-5);
  absl::StatusOr<v1::SubmitBatchesResponse> rejected =
      handler->SubmitBatches(bad);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rejected.status().message(), HasSubstr("batches[1].samples[0]"));
  handler->Shutdown();
  handler->Shutdown();
  // After shutdown, submitted batches are planned on demand.
  v1::SubmitBatchesRequest later;
  *later.add_batches() = MakeBatch(30);
  EXPECT_EQ(handler->SubmitBatches(later)->accepted(), 1);
  EXPECT_EQ(metrics.plans_computed(), 3);
  EXPECT_TRUE(handler->GetPlan(PlanRequest("w0", MakeBatch(30))).ok());
  EXPECT_EQ(metrics.plans_computed(), 4);
}

TEST(PlannerHandlerTest, AtMost256SubmittedBatchesWaitToBePlanned) {
  FakeClock clock;
  RecordingMetrics metrics;
  PlannerHandlerOptions options = GpuOptions();
  options.background_planning_threads = 0;  // nothing plans them ahead
  auto handler = MakeHandler(options, clock, &metrics);
  RegisterWorld(*handler, 4, 8);
  v1::SubmitBatchesRequest many;
  for (int64_t step = 0; step < 256; ++step) {
    *many.add_batches() = MakeBatch(step, 4);
  }
  ASSERT_TRUE(handler->SubmitBatches(many).ok());
  ASSERT_TRUE(handler->SubmitBatches(many).ok());  // nothing new
  v1::SubmitBatchesRequest one_more;
  *one_more.add_batches() = MakeBatch(256, 4);
  absl::StatusOr<v1::SubmitBatchesResponse> refused =
      handler->SubmitBatches(one_more);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("256 submitted batches are waiting to be planned and "
                        "this request adds 1; at most 256"));
  // Planning one makes room for one.
  v1::GetPlanRequest by_step;
  by_step.set_worker_id("w0");
  by_step.set_step(0);
  ASSERT_TRUE(handler->GetPlan(by_step).ok());
  EXPECT_TRUE(handler->SubmitBatches(one_more).ok());
  EXPECT_EQ(handler->SubmitBatches(one_more)->accepted(), 1);
  EXPECT_EQ(metrics.plans_computed(), 1);
}

TEST(PlannerHandlerTest, LazyPlanningWithoutBackgroundThreads) {
  FakeClock clock;
  RecordingMetrics metrics;
  auto handler = MakeHandler(GpuOptions(), clock, &metrics);
  RegisterWorld(*handler, 4, 8);
  v1::SubmitBatchesRequest submit;
  *submit.add_batches() = MakeBatch(0);
  *submit.add_batches() = MakeBatch(1);
  EXPECT_EQ(handler->SubmitBatches(submit)->accepted(), 2);
  EXPECT_EQ(metrics.plans_computed(), 0);
  ASSERT_TRUE(handler->GetPlan(PlanRequest("w0", MakeBatch(1))).ok());
  EXPECT_EQ(metrics.plans_computed(), 1);
}

/// A planner that keeps 2 plans in memory, with steps 0, 1 and 2 planned
/// (`first` holds their serialized plans): step 0's has been evicted.
class EvictionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PlannerHandlerOptions options = GpuOptions();
    options.plan_cache_steps = 2;
    handler = MakeHandler(options, clock, &metrics);
    RegisterWorld(*handler, 4, 8);
    for (int64_t step = 0; step < 3; ++step) {
      first.push_back(
          *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(step)))
               .value());
    }
  }

  FakeClock clock;
  RecordingMetrics metrics;
  std::unique_ptr<PlannerHandler> handler;
  std::vector<std::string> first;
};

TEST_F(EvictionTest, EvictedPlansAreReplannedIdentically) {
  EXPECT_EQ(metrics.plans_computed(), 3);
  EXPECT_EQ(
      *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(2))).value(),
      first[2]);
  EXPECT_EQ(metrics.plans_computed(), 3);  // cached
  EXPECT_EQ(
      *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(0))).value(),
      first[0]);
  EXPECT_EQ(metrics.plans_computed(), 4);  // evicted, planned again
}

v1::GetPlanRequest StepRequest(const std::string& worker, int64_t step,
                               uint64_t fingerprint = 0) {
  v1::GetPlanRequest request;
  request.set_worker_id(worker);
  request.set_step(step);
  request.set_batch_fingerprint(fingerprint);
  return request;
}

TEST(PlannerHandlerTest, SubmittedStepsAreServedByStep) {
  FakeClock clock;
  RecordingMetrics metrics;
  auto handler = MakeHandler(GpuOptions(), clock, &metrics);
  RegisterWorld(*handler, 4, 8);
  v1::SubmitBatchesRequest submit;
  *submit.add_batches() = MakeBatch(0);
  *submit.add_batches() = MakeBatch(1);
  ASSERT_TRUE(handler->SubmitBatches(submit).ok());
  EXPECT_EQ(metrics.plans_computed(), 0);
  // Without background threads the first request by step plans it.
  absl::StatusOr<std::shared_ptr<const std::string>> by_step =
      handler->GetSerializedPlan(StepRequest("w0", 1));
  ASSERT_TRUE(by_step.ok()) << by_step.status();
  EXPECT_EQ(metrics.plans_computed(), 1);
  // With the fingerprint the caller holds the batch: the same plan without
  // sample_ids (one shared buffer of its own).
  const uint64_t fingerprint = BatchFingerprint(MakeBatch(1));
  absl::StatusOr<std::shared_ptr<const std::string>> checked =
      handler->GetSerializedPlan(StepRequest("w1", 1, fingerprint));
  ASSERT_TRUE(checked.ok()) << checked.status();
  v1::GetPlanResponse full;
  ASSERT_TRUE(full.ParseFromString(**by_step));
  v1::GetPlanResponse without_ids;
  ASSERT_TRUE(without_ids.ParseFromString(**checked));
  EXPECT_EQ(without_ids.sample_ids_size(), 0);
  EXPECT_EQ(full.sample_ids_size(), MakeBatch(1).samples_size());
  full.clear_sample_ids();
  EXPECT_EQ(without_ids.SerializeAsString(), full.SerializeAsString());
  absl::StatusOr<std::shared_ptr<const std::string>> checked_again =
      handler->GetSerializedPlan(StepRequest("w0", 1, fingerprint));
  ASSERT_TRUE(checked_again.ok());
  EXPECT_EQ(*checked_again, *checked);
  absl::StatusOr<std::shared_ptr<const std::string>> with_batch =
      handler->GetSerializedPlan(PlanRequest("w2", MakeBatch(1)));
  ASSERT_TRUE(with_batch.ok());
  EXPECT_EQ(*with_batch, *by_step);
  v1::GetPlanRequest both = PlanRequest("w3", MakeBatch(1));
  both.set_step(1);
  both.set_batch_fingerprint(fingerprint);
  EXPECT_EQ(handler->GetSerializedPlan(both).value(), *by_step);
  absl::StatusOr<v1::GetPlanResponse> step0 =
      handler->GetPlan(StepRequest("w0", 0));
  ASSERT_TRUE(step0.ok()) << step0.status();
  EXPECT_EQ(step0->plan().step(), 0);
  ASSERT_EQ(step0->sample_ids_size(), 48);
  EXPECT_EQ(step0->sample_ids(3), MakeBatch(0).samples(3).id());
  EXPECT_EQ(metrics.plans_computed(), 2);
  // A step planned from a GetPlan with samples is served by step too.
  ASSERT_TRUE(handler->GetPlan(PlanRequest("w0", MakeBatch(7))).ok());
  EXPECT_EQ(handler->GetPlan(StepRequest("w1", 7))->plan().step(), 7);
  EXPECT_EQ(metrics.plans_computed(), 3);
  // Requests by step mark the worker active at that step.
  v1::ListWorkersResponse workers = handler->ListWorkers({}).value();
  EXPECT_EQ(workers.workers(1).state(), v1::WorkerInfo::ACTIVE);
  EXPECT_EQ(workers.workers(1).last_step(), 7);
}

TEST(PlannerHandlerTest, ConcurrentRequestsByStepPlanOnce) {
  FakeClock clock;
  RecordingMetrics metrics;
  PlannerHandlerOptions options = GpuOptions();
  options.background_planning_threads = 1;
  auto handler = MakeHandler(options, clock, &metrics);
  RegisterWorld(*handler, 4, 8);
  for (int64_t step = 0; step < 3; ++step) {
    v1::SubmitBatchesRequest submit;
    *submit.add_batches() = MakeBatch(step);
    ASSERT_TRUE(handler->SubmitBatches(submit).ok());
    const uint64_t fingerprint = BatchFingerprint(MakeBatch(step));
    std::vector<std::shared_ptr<const std::string>> plans(16);
    std::vector<std::thread> threads;
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([&, t] {
        absl::StatusOr<std::shared_ptr<const std::string>> plan =
            handler->GetSerializedPlan(StepRequest(
                absl::StrCat("w", t % 4), step, t % 2 ? fingerprint : 0));
        ASSERT_TRUE(plan.ok()) << plan.status();
        plans[t] = *plan;
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(metrics.plans_computed(), step + 1);
    // One shared buffer per kind of answer: without the fingerprint (with
    // sample_ids) and with it (without).
    for (int t = 2; t < 16; ++t) EXPECT_EQ(plans[t], plans[t % 2]);
  }
}

TEST(PlannerHandlerTest, ByStepWithAnotherFingerprintNamesBoth) {
  FakeClock clock;
  auto handler = MakeHandler(GpuOptions(), clock, nullptr);
  RegisterWorld(*handler, 4, 8);
  ASSERT_TRUE(handler->GetPlan(PlanRequest("w0", MakeBatch(4))).ok());
  const uint64_t recorded = BatchFingerprint(MakeBatch(4));
  const uint64_t other = BatchFingerprint(MakeBatch(4, 48, /*salt=*/1));
  ASSERT_NE(recorded, other);
  absl::StatusOr<v1::GetPlanResponse> response =
      handler->GetPlan(StepRequest("w1", 4, other));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      response.status().message(),
      AllOf(
          HasSubstr(absl::StrFormat("batch_fingerprint = %016x", other)),
          HasSubstr(absl::StrFormat(
              "step 4 was recorded with batch fingerprint %016x", recorded))));
  // Before planning too: a submitted step's fingerprint is recorded.
  v1::SubmitBatchesRequest submit;
  *submit.add_batches() = MakeBatch(5);
  ASSERT_TRUE(handler->SubmitBatches(submit).ok());
  EXPECT_EQ(handler->GetPlan(StepRequest("w1", 5, other)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PlannerHandlerTest, UnknownStepByStepIsFailedPrecondition) {
  FakeClock clock;
  RecordingMetrics metrics;
  auto handler = MakeHandler(GpuOptions(), clock, &metrics);
  // While the world is incomplete, that is the answer.
  ASSERT_TRUE(handler->RegisterWorker(Worker("w0", "node0", 8)).ok());
  EXPECT_THAT(handler->GetPlan(StepRequest("w0", 3)).status().message(),
              HasSubstr("the world is incomplete"));
  RegisterWorld(*handler, 4, 8);
  for (const v1::GetPlanRequest& request :
       {StepRequest("w0", 3), StepRequest("w0", 3, /*fingerprint=*/77)}) {
    absl::StatusOr<v1::GetPlanResponse> response = handler->GetPlan(request);
    EXPECT_EQ(response.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(response.status().message(),
              "step 3 is unknown: submit its batch (SubmitBatches or GetPlan "
              "with samples) first");
  }
  // A request with nothing at all asks for step 0.
  v1::GetPlanRequest nothing;
  nothing.set_worker_id("w0");
  EXPECT_THAT(handler->GetPlan(nothing).status().message(),
              HasSubstr("step 0 is unknown"));
  EXPECT_EQ(handler->GetPlan(StepRequest("stranger", 3)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(metrics.plans_computed(), 0);
}

TEST_F(EvictionTest, EvictedStepsNeedTheirBatchAgain) {
  EXPECT_EQ(*handler->GetSerializedPlan(StepRequest("w0", 2)).value(),
            first[2]);
  absl::StatusOr<std::shared_ptr<const std::string>> evicted =
      handler->GetSerializedPlan(StepRequest("w0", 0));
  EXPECT_EQ(evicted.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(evicted.status().message(),
              AllOf(HasSubstr("step 0's plan is no longer in memory"),
                    HasSubstr("older than the last 2 planned steps"),
                    HasSubstr("ask again with the batch's samples")));
  // The fingerprint is still checked first.
  EXPECT_THAT(handler->GetPlan(StepRequest("w0", 0, /*fingerprint=*/5))
                  .status()
                  .message(),
              HasSubstr("was recorded with batch fingerprint"));
  EXPECT_EQ(metrics.plans_computed(), 3);
  // Sent again (with GetPlan, or SubmitBatches), it is planned identically
  // and served by step.
  EXPECT_EQ(
      *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(0))).value(),
      first[0]);
  EXPECT_EQ(*handler->GetSerializedPlan(StepRequest("w1", 0)).value(),
            first[0]);
  EXPECT_EQ(metrics.plans_computed(), 4);
  v1::SubmitBatchesRequest submit;
  *submit.add_batches() = MakeBatch(1);  // evicted by step 0's return
  ASSERT_TRUE(handler->SubmitBatches(submit).ok());
  EXPECT_EQ(*handler->GetSerializedPlan(StepRequest("w1", 1)).value(),
            first[1]);
  EXPECT_EQ(metrics.plans_computed(), 5);
}

TEST(PlannerHandlerTest, AfterRestartStepsByStepNeedTheirBatch) {
  const std::string directory = FreshTestDirectory("planner_handler_");
  FakeClock clock;
  PlannerHandlerOptions options = GpuOptions();
  options.state_dir = directory;
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

TEST(PlannerHandlerTest, StateWithOtherFingerprintVersionIsRefused) {
  const std::string directory = FreshTestDirectory("planner_handler_");
  FakeClock clock;
  PlannerHandlerOptions options = GpuOptions();
  options.state_dir = directory;
  ASSERT_NE(MakeHandler(options, clock, nullptr), nullptr);
  const std::string path = absl::StrCat(directory, "/job.pb");
  v1::JobRecord job;
  {
    std::ifstream file(path, std::ios::binary);
    ASSERT_TRUE(job.ParseFromIstream(&file));
  }
  ASSERT_EQ(job.batch_fingerprint_version(), kBatchFingerprintVersion);
  // A directory of the byte-wise FNV-1a planner (version 1).
  job.set_batch_fingerprint_version(1);
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    ASSERT_TRUE(job.SerializeToOstream(&file));
  }
  absl::StatusOr<std::unique_ptr<PlannerHandler>> reopened =
      PlannerHandler::Create(options, clock, nullptr, nullptr);
  EXPECT_EQ(reopened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reopened.status().message(),
              AllOf(HasSubstr("batch fingerprints of version 1"),
                    HasSubstr(absl::StrCat("computes version ",
                                           kBatchFingerprintVersion)),
                    HasSubstr("fresh state_dir")));
}

TEST(PlannerHandlerTest, RegistrationsAreRecordedOnlyWithAStateDirectory) {
  const std::string directory = FreshTestDirectory("planner_handler_");
  FakeClock clock;
  {
    auto handler = MakeHandler(GpuOptions(), clock, nullptr);
    RegisterWorld(*handler, 4, 8);
  }
  EXPECT_FALSE(std::filesystem::exists(directory));
  PlannerHandlerOptions options = GpuOptions();
  options.state_dir = directory;
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

TEST(PlannerHandlerTest, UnplannableBatchIsResourceExhausted) {
  FakeClock clock;
  auto handler = MakeHandler(GpuOptions(), clock, nullptr);
  RegisterWorld(*handler, 4, 8);
  v1::GlobalBatch batch = MakeBatch(0, 4);
  batch.mutable_samples(2)->set_length_tokens(2'000'000'000);
  absl::StatusOr<v1::GetPlanResponse> response =
      handler->GetPlan(PlanRequest("w0", batch));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(response.status().message(), HasSubstr("step 0: "));
  // The same request gets the same answer; reports for it are refused.
  EXPECT_EQ(handler->GetPlan(PlanRequest("w1", batch)).status().code(),
            absl::StatusCode::kResourceExhausted);
  v1::ReportStepStatsRequest report;
  report.set_worker_id("w0");
  report.set_step(0);
  report.set_rank(0);
  report.set_step_seconds(1);
  EXPECT_EQ(handler->ReportStepStats(report).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Reports of one CPU-world step: every rank's step seconds and micro-batch
// compute times at `factor` times the prediction.
std::vector<v1::ReportStepStatsRequest> ReportsFor(
    const v1::GetPlanResponse& plan, double factor,
    const std::vector<double>& step_seconds_by_rank,
    const std::vector<std::pair<std::string, int>>& worker_of_rank) {
  std::vector<v1::ReportStepStatsRequest> reports;
  for (const v1::Group& group : plan.plan().groups()) {
    for (int rank : group.ranks()) {
      v1::ReportStepStatsRequest report;
      report.set_worker_id(worker_of_rank[rank].first);
      report.set_step(plan.plan().step());
      report.set_rank(rank);
      report.set_step_seconds(step_seconds_by_rank.empty()
                                  ? factor * group.predicted_seconds()
                                  : step_seconds_by_rank[rank]);
      for (int m = 0; m < group.micro_batches_size(); ++m) {
        v1::MicroBatchStats* stats = report.add_micro_batches();
        stats->set_micro_batch_index(m);
        stats->set_compute_seconds(factor *
                                   group.micro_batches(m).predicted_seconds());
        stats->set_peak_memory_bytes(
            group.micro_batches(m).predicted_peak_bytes());
      }
      reports.push_back(report);
    }
  }
  return reports;
}

TEST(PlannerHandlerTest, StepStatsFeedMetricsAndImbalance) {
  FakeClock clock;
  RecordingMetrics metrics;
  auto handler = MakeHandler(CpuOptions(), clock, &metrics);
  RegisterWorld(*handler, 4, 1);
  const v1::GetPlanResponse plan =
      handler->GetPlan(PlanRequest("w0", MakeBatch(0, 12))).value();
  std::vector<std::pair<std::string, int>> worker_of_rank;
  for (int r = 0; r < 4; ++r)
    worker_of_rank.push_back({absl::StrCat("w", r), r});
  const std::vector<double> seconds = {1.0, 2.0, 3.0, 4.0};
  std::vector<v1::ReportStepStatsRequest> reports =
      ReportsFor(plan, 1, seconds, worker_of_rank);
  ASSERT_EQ(reports.size(), 4u);
  double expected_error_sum = 0;
  for (size_t i = 0; i < reports.size(); ++i) {
    const v1::ReportStepStatsRequest& report = reports[i];
    double predicted = 0;
    for (const v1::Group& group : plan.plan().groups()) {
      for (int rank : group.ranks()) {
        if (rank == report.rank()) predicted = group.predicted_seconds();
      }
    }
    absl::StatusOr<v1::ReportStepStatsResponse> response =
        handler->ReportStepStats(report);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_DOUBLE_EQ(response->measured_over_predicted(),
                     report.step_seconds() / predicted);
    expected_error_sum +=
        std::abs(report.step_seconds() - predicted) / report.step_seconds();
    EXPECT_EQ(metrics.imbalances().size(), i + 1 == reports.size() ? 1u : 0u);
  }
  ASSERT_EQ(metrics.imbalances().size(), 1u);
  EXPECT_DOUBLE_EQ(metrics.imbalances()[0], (4.0 - 2.5) / 4.0);
  EXPECT_EQ(metrics.measured().size(), 4u);
  EXPECT_EQ(metrics.errors().size(), 4u);
  EXPECT_NEAR(handler->GetClusterModel({})->step_relative_error(),
              expected_error_sum / 4, 1e-12);
  // A repeated report replaces the earlier one; the imbalance is not
  // reported twice.
  ASSERT_TRUE(handler->ReportStepStats(reports[0]).ok());
  EXPECT_EQ(metrics.imbalances().size(), 1u);
  EXPECT_NEAR(handler->GetClusterModel({})->step_relative_error(),
              expected_error_sum / 4, 1e-12);

  // Reports are workers' and ranks' and steps' that exist.
  v1::ReportStepStatsRequest bad = reports[0];
  bad.set_worker_id("w1");
  EXPECT_THAT(handler->ReportStepStats(bad).status().message(),
              HasSubstr("rank = "));
  bad = reports[0];
  bad.set_rank(4);
  EXPECT_THAT(handler->ReportStepStats(bad).status().message(),
              HasSubstr("rank = 4"));
  bad = reports[0];
  bad.set_step(9);
  EXPECT_EQ(handler->ReportStepStats(bad).status().code(),
            absl::StatusCode::kFailedPrecondition);
  bad = reports[0];
  bad.set_step_seconds(std::nan(""));
  EXPECT_THAT(handler->ReportStepStats(bad).status().message(),
              HasSubstr("step_seconds = nan"));
  bad = reports[0];
  bad.set_step_seconds(0);
  EXPECT_THAT(handler->ReportStepStats(bad).status().message(),
              HasSubstr("step_seconds = 0"));
  bad = reports[0];
  bad.add_micro_batches()->set_micro_batch_index(99);
  EXPECT_THAT(handler->ReportStepStats(bad).status().message(),
              HasSubstr("micro_batch_index = 99"));
  bad = reports[0];
  bad.mutable_micro_batches(0)->set_compute_seconds(-1);
  EXPECT_THAT(handler->ReportStepStats(bad).status().message(),
              HasSubstr("micro_batches[0].compute_seconds = -1"));
  bad = reports[0];
  bad.mutable_micro_batches(0)->set_idle_seconds(INFINITY);
  EXPECT_THAT(handler->ReportStepStats(bad).status().message(),
              HasSubstr("micro_batches[0].idle_seconds = inf"));
  bad = reports[0];
  bad.mutable_micro_batches(0)->set_peak_memory_bytes(-2);
  EXPECT_THAT(handler->ReportStepStats(bad).status().message(),
              HasSubstr("micro_batches[0].peak_memory_bytes = -2"));
  bad = reports[0];
  *bad.add_micro_batches() = bad.micro_batches(0);
  EXPECT_THAT(handler->ReportStepStats(bad).status().message(),
              HasSubstr("repeats"));
  bad = reports[0];
  bad.set_worker_id("ghost");
  EXPECT_EQ(handler->ReportStepStats(bad).status().code(),
            absl::StatusCode::kNotFound);
  bad = reports[0];
  bad.set_step(-2);
  EXPECT_THAT(handler->ReportStepStats(bad).status().message(),
              HasSubstr("step = -2"));
}

/// One node of 8 GPUs with online refit on, worker w0 registered, and the
/// plan of step 0 (16 sequences).
class OnlineRefitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options.cluster = H200Cluster(/*num_nodes=*/1, /*gpus_per_node=*/8);
    options.online_refit = true;
    handler = MakeHandler(options, clock, &metrics);
    ASSERT_TRUE(handler->RegisterWorker(Worker("w0", "node0", 8)).ok());
    first = handler->GetPlan(PlanRequest("w0", MakeBatch(0, 16))).value();
  }

  FakeClock clock;
  RecordingMetrics metrics;
  PlannerHandlerOptions options = GpuOptions();
  std::unique_ptr<PlannerHandler> handler;
  const std::vector<std::pair<std::string, int>> worker_of_rank =
      std::vector<std::pair<std::string, int>>(8, {"w0", 0});
  v1::GetPlanResponse first;
};

TEST_F(OnlineRefitTest, FollowsMeasuredComputeTime) {
  EXPECT_EQ(first.params_version(), 0);
  for (const v1::ReportStepStatsRequest& report :
       ReportsFor(first, /*factor=*/2, {}, worker_of_rank)) {
    absl::StatusOr<v1::ReportStepStatsResponse> response =
        handler->ReportStepStats(report);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_NEAR(response->measured_over_predicted(), 2, 1e-9);
  }
  v1::GetClusterModelResponse model = handler->GetClusterModel({}).value();
  EXPECT_EQ(model.params_version(), 1);
  EXPECT_FALSE(model.using_default_params());
  const CostParams defaults = DefaultCostParams(options.model, options.cluster);
  // Micro-batch times include communication, so the compute factor is a bit
  // above 2.
  const double factor = defaults.compute.gemm_flops_per_second /
                        model.params().compute().gemm_flops_per_second();
  EXPECT_GT(factor, 1.95);
  EXPECT_LT(factor, 2.3);
  // The same batch planned for a later step is predicted about 2x slower.
  v1::GlobalBatch same = MakeBatch(0, 16);
  same.set_step(1);
  const v1::GetPlanResponse later =
      handler->GetPlan(PlanRequest("w0", same)).value();
  EXPECT_EQ(later.params_version(), 1);
  const double ratio = later.plan().predicted_step_seconds() /
                       first.plan().predicted_step_seconds();
  EXPECT_GT(ratio, 1.7);
  EXPECT_LT(ratio, 2.3);
  // Measurements that match the corrected model change nothing more.
  for (const v1::ReportStepStatsRequest& report :
       ReportsFor(later, /*factor=*/1, {}, worker_of_rank)) {
    ASSERT_TRUE(handler->ReportStepStats(report).ok());
  }
  EXPECT_EQ(handler->GetClusterModel({})->params_version(), 1);
}

TEST_F(OnlineRefitTest, AbsurdlySmallMeasurementsDoNotCorruptTheModel) {
  // Valid (finite, > 0) but so small that predicted / measured overflows.
  for (const v1::ReportStepStatsRequest& report :
       ReportsFor(first, /*factor=*/1e-320, {}, worker_of_rank)) {
    absl::StatusOr<v1::ReportStepStatsResponse> response =
        handler->ReportStepStats(report);
    ASSERT_TRUE(response.ok()) << response.status();
  }
  // No refit from them, and no non-finite error reached the metrics.
  EXPECT_EQ(handler->GetClusterModel({})->params_version(), 0);
  for (double error : metrics.errors()) EXPECT_TRUE(std::isfinite(error));
  v1::GlobalBatch next = MakeBatch(0, 16);
  next.set_step(1);
  const v1::GetPlanResponse later =
      handler->GetPlan(PlanRequest("w0", next)).value();
  EXPECT_EQ(later.plan().predicted_step_seconds(),
            first.plan().predicted_step_seconds());
}

TEST(PlannerHandlerTest, ListWorkersTracksLiveness) {
  FakeClock clock(absl::FromUnixSeconds(1'700'000'000));
  PlannerHandlerOptions options = CpuOptions();
  options.worker_liveness_timeout = absl::Seconds(60);
  auto handler = MakeHandler(options, clock, nullptr);
  RegisterWorld(*handler, 4, 1);
  auto states = [&] {
    std::vector<v1::WorkerInfo::State> result;
    const v1::ListWorkersResponse listed = handler->ListWorkers({}).value();
    for (const v1::WorkerInfo& info : listed.workers()) {
      result.push_back(info.state());
    }
    return result;
  };
  using State = v1::WorkerInfo;
  EXPECT_EQ(states(),
            (std::vector<v1::WorkerInfo::State>(4, State::REGISTERED)));
  clock.Advance(absl::Seconds(10));
  ASSERT_TRUE(handler->GetPlan(PlanRequest("w1", MakeBatch(7, 8))).ok());
  v1::ListWorkersResponse listed = handler->ListWorkers({}).value();
  EXPECT_EQ(listed.world_size(), 4);
  EXPECT_TRUE(listed.world_complete());
  EXPECT_EQ(listed.workers(1).state(), State::ACTIVE);
  EXPECT_EQ(listed.workers(1).last_step(), 7);
  EXPECT_EQ(listed.workers(1).last_seen_unix_millis(), 1'700'000'010'000);
  EXPECT_EQ(listed.workers(0).last_step(), -1);
  EXPECT_EQ(listed.workers(0).last_seen_unix_millis(), 1'700'000'000'000);
  EXPECT_EQ(listed.workers(2).backend(), "nccl");
  EXPECT_EQ(listed.workers(2).gpu_kind(), "H200");
  EXPECT_EQ(listed.workers(2).libtorch_version(), "2.4.0");
  clock.Advance(absl::Seconds(55));
  EXPECT_EQ(states(),
            (std::vector<v1::WorkerInfo::State>{State::LOST, State::ACTIVE,
                                                State::LOST, State::LOST}));
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(states()[1], State::LOST);
  // A report brings a worker back.
  v1::ReportStepStatsRequest report;
  report.set_worker_id("w3");
  report.set_step(7);
  report.set_rank(3);
  report.set_step_seconds(0.5);
  ASSERT_TRUE(handler->ReportStepStats(report).ok());
  EXPECT_EQ(states()[3], State::ACTIVE);
}

}  // namespace
}  // namespace dcp
