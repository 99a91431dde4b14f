// RunLoadTest: the one sequential scenario (register, profile, then per step
// submit, fetch, train, report) as LoadTestRun's phases. Its client threads
// are load_test_threads.h, its simulated workers load_test_worker.h, what
// it counts of the planner counting_planner_metrics.h, and its command line
// load_test_command_line.cc. Over 600 lines: LoadTestRun's phases share the
// run's state (the planner, its connections, the simulated workers and the
// latency rows), one class.

#include "planner/service/load_test.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "cost_model/model_spec.h"
#include "dcp/v1/planner_service.pb.h"
#include "planner/client/planner_client.h"
#include "planner/client/proto_convert.h"
#include "planner/service/counting_planner_metrics.h"
#include "planner/service/load_test_threads.h"
#include "planner/service/load_test_worker.h"
#include "planner/service/metrics_scrape.h"
#include "planner/service/planner_handler.h"
#include "planner/service/planner_metrics.h"
#include "planner/service/planner_server.h"
#include "planner/service/prometheus_metrics.h"
#include "planner/workload/workload.h"

namespace dcp {
namespace {

absl::Status ValidateOptions(const LoadTestOptions& options) {
  auto range = [](const char* flag, int64_t value, int64_t min,
                  int64_t max) -> absl::Status {
    if (value < min || value > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, "=", value, ": expected an integer in [",
                       min, ", ", max, "]"));
    }
    return absl::OkStatus();
  };
  for (absl::Status status :
       {range("workers", options.workers, 1, 1 << 14),
        range("ranks-per-worker", options.ranks_per_worker, 1, 64),
        range("steps", options.steps, 1, 1 << 20),
        range("connections", options.connections, 1, 4096),
        range("threads", options.threads, 1, 4096),
        range("server-threads", options.server_call_threads, 1, 1024),
        range("planning-threads", options.planning_threads, 0,
              kMaxBackgroundPlanningThreads),
        range("profile-samples", options.profile_samples, 0, 100000),
        range("register-while-planning", options.register_while_planning, 0,
              1 << 20)}) {
    if (!status.ok()) return status;
  }
  if (options.global_batch_tokens < 0 || options.global_batch_samples < 0 ||
      (options.global_batch_tokens > 0 && options.global_batch_samples > 0)) {
    return absl::InvalidArgumentError(
        "give at most one of --global-batch-tokens and "
        "--global-batch-samples, and a positive value");
  }
  if (!(options.noise >= 0) || !(options.noise < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--noise=", options.noise, ": expected a fraction in [0, 1)"));
  }
  if (!(options.train_seconds >= 0) || options.train_seconds > 3600) {
    return absl::InvalidArgumentError(
        absl::StrCat("--train-seconds=", options.train_seconds,
                     ": expected seconds in [0, 3600]"));
  }
  return absl::OkStatus();
}

/// One run of the scenario: the planner and its connections, the simulated
/// workers and the latency rows, shared by the phases Run goes through in
/// order. Single use; the phases run their calls on RunPhase's client
/// threads.
class LoadTestRun {
 public:
  LoadTestRun(const LoadTestOptions& options,
              const std::function<void(const std::string&)>& log)
      : options_(options), log_(log) {}

  absl::StatusOr<LoadTestResult> Run() {
    test_start_ = absl::Now();
    cpu_start_ = ProcessCpuSeconds();
    DCP_RETURN_IF_ERROR(MakeBatches());
    DCP_RETURN_IF_ERROR(StartPlanner());
    DCP_RETURN_IF_ERROR(Connect());
    RegisterWorkers();
    // Rank 0 hands in the first batch once it is registered (SubmitBatches
    // takes only a registered worker's batches, and needs no complete
    // world), so that the planner plans it while the workers profile; each
    // later batch goes in when the step before starts.
    if (options_.ahead) Submit(0);
    result_.tcp_connections = CountTcpConnectionsTo(server_->port());
    CheckWorld();
    if (world_complete_ && options_.profile_samples > 0) {
      DCP_RETURN_IF_ERROR(SubmitProfiles());
    }
    for (int k = 0; world_complete_ && k < options_.steps; ++k) RunStep(k);
    if (get_plan_calls_ > 0) {
      result_.cpu_ms_per_get_plan =
          1e3 * get_plan_process_cpu_ / get_plan_calls_;
      result_.client_cpu_ms_per_get_plan =
          1e3 * get_plan_client_cpu_ / get_plan_calls_;
    }
    ReadPlannerCounts();
    for (const char* name :
         {kRegisterWorker, kRegisterWhilePlanning, kListWorkers,
          kSubmitProfile, kSubmitBatches, kGetPlan, kGetPlanHit,
          kGetPlanWaited, kReportStepStats, kReportPerWorker}) {
      auto it = rows_.find(name);
      if (it != rows_.end()) result_.rpcs.push_back(it->second.Summarize(name));
    }
    // Idle clients first: the server's graceful shutdown then has no
    // connections to wait for.
    for (SimulatedWorker& worker : workers_) worker.client = nullptr;
    clients_.clear();
    server_->Shutdown(absl::Seconds(2));
    result_.wall_seconds = absl::ToDoubleSeconds(absl::Now() - test_start_);
    if (result_.wall_seconds > 0) {
      result_.cpus_used =
          (ProcessCpuSeconds() - cpu_start_) / result_.wall_seconds;
    }
    return result_;
  }

 private:
  // --- Setup ---------------------------------------------------------------

  /// The job and its batches (all workers use the same deterministic
  /// stream).
  absl::Status MakeBatches() {
    result_.options = options_;
    result_.host_cpus = static_cast<int>(std::thread::hardware_concurrency());
    result_.load_average_at_start = LoadAverage();
    result_.num_nodes = options_.workers;
    result_.gpus_per_node = options_.ranks_per_worker;
    result_.world_size = options_.workers * options_.ranks_per_worker;
    absl::StatusOr<ModelSpec> model = LoadModelSpec(options_.model);
    if (!model.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--model=", options_.model, ": ", model.status().message()));
    }
    model_ = *std::move(model);
    cluster_ = H200Cluster(result_.num_nodes, result_.gpus_per_node);
    DCP_RETURN_IF_ERROR(ValidateClusterSpec(cluster_));
    absl::StatusOr<std::unique_ptr<LengthSource>> source =
        ParseWorkloadSpec(options_.workload);
    if (!source.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--workload=", options_.workload, ": ", source.status().message()));
    }
    BatchOptions batch_options;
    batch_options.global_batch_tokens = options_.global_batch_tokens;
    batch_options.global_batch_samples = options_.global_batch_samples;
    if (batch_options.global_batch_tokens == 0 &&
        batch_options.global_batch_samples == 0) {
      batch_options.global_batch_samples =
          kDefaultSamplesPerGpu * result_.world_size;
    }
    result_.global_batch_samples = batch_options.global_batch_samples;
    result_.global_batch_tokens = batch_options.global_batch_tokens;
    absl::StatusOr<BatchStream> stream =
        BatchStream::Create(*std::move(source), batch_options, options_.seed);
    if (!stream.ok()) return stream.status();
    batches_.resize(options_.steps);
    for (int k = 0; k < options_.steps; ++k) {
      batches_[k].set_step(k);
      for (const Sample& sample : stream->Next()) {
        v1::Sample* added = batches_[k].add_samples();
        added->set_id(sample.id);
        added->set_length_tokens(sample.length_tokens);
      }
    }
    return absl::OkStatus();
  }

  /// The planner, in this process.
  absl::Status StartPlanner() {
    PlannerServer::Options server_options;
    server_options.listen_address = "127.0.0.1:0";
    server_options.metrics_address = "127.0.0.1:0";
    server_options.handler.model = model_;
    server_options.handler.cluster = cluster_;
    server_options.handler.background_planning_threads =
        options_.planning_threads;
    server_options.call_threads = options_.server_call_threads;
    absl::StatusOr<std::unique_ptr<PlannerServer>> server =
        PlannerServer::Start(
            std::move(server_options), RealClock::Get(), log_,
            [this](PlannerHandlerOptions handler_options, const Clock& clock,
                   PlannerMetrics* metrics,
                   std::function<void(const std::string&)> handler_log)
                -> absl::StatusOr<std::unique_ptr<PlannerHandler>> {
              counting_metrics_ =
                  std::make_unique<CountingPlannerMetrics>(metrics);
              return PlannerHandler::Create(std::move(handler_options), clock,
                                            counting_metrics_.get(),
                                            std::move(handler_log));
            });
    if (!server.ok()) return server.status();
    server_ = *std::move(server);
    return absl::OkStatus();
  }

  /// The shared connections and the workers using them. gRPC shares one
  /// TCP connection among channels with equal arguments; a distinct
  /// (irrelevant: no retries) reconnect backoff per channel gives each its
  /// own.
  absl::Status Connect() {
    for (int c = 0; c < options_.connections; ++c) {
      GrpcPlannerClient::Options client_options;
      client_options.target = absl::StrCat("127.0.0.1:", server_->port());
      client_options.call_deadline = absl::Seconds(60);
      // A load test reports failures instead of retrying them.
      client_options.retry.max_attempts = 1;
      client_options.retry.initial_backoff = absl::Milliseconds(100 + c);
      client_options.retry.max_backoff = absl::Seconds(10);
      absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> client =
          GrpcPlannerClient::Create(std::move(client_options));
      if (!client.ok()) return client.status();
      clients_.push_back(*std::move(client));
    }
    workers_.resize(options_.workers);
    for (int w = 0; w < options_.workers; ++w) {
      workers_[w].worker_id = absl::StrFormat("worker-%05d", w);
      workers_[w].node_name = absl::StrFormat("node-%05d", w);
      workers_[w].client = clients_[w % options_.connections].get();
    }
    return absl::OkStatus();
  }

  // --- Rows ----------------------------------------------------------------

  void Absorb(const Phase& phase, LatencyRow& row) {
    row.wall_seconds += phase.wall_seconds;
    row.failures += phase.merged.failures;
    result_.failed_calls += phase.merged.failures;
    for (const std::string& error : phase.merged.errors) {
      if (result_.errors.size() < kMaxErrorsKept) {
        result_.errors.push_back(error);
      }
    }
    for (const std::string& problem : phase.merged.problems) {
      result_.problems.push_back(problem);
    }
  }

  /// Every call of `phase` into the row `name`.
  void AddPhase(const std::string& name, const Phase& phase) {
    LatencyRow& row = rows_[name];
    for (const CallRecord& call : phase.merged.calls) row.Add(call.ms);
    Absorb(phase, row);
  }

  /// One call on this thread, as a one-task phase.
  void CallOnce(const std::string& name,
                const std::function<absl::Status()>& call) {
    Phase phase = RunPhase(1, 1, [&](int, ThreadLog& thread_log) {
      if (absl::Status status = TimedCall(thread_log, call); !status.ok()) {
        thread_log.Fail(name, status);
      }
    });
    rows_[name].throughput = false;  // single calls, not a load
    AddPhase(name, phase);
  }

  // --- Registration and profiles ------------------------------------------

  /// Worker 0 (rank 0) submits a step's batch, as the worker agent does;
  /// the other workers then ask for the plan by step.
  void Submit(int64_t step) {
    CallOnce(kSubmitBatches, [&]() -> absl::Status {
      v1::SubmitBatchesRequest request;
      request.set_worker_id(workers_[0].worker_id);
      *request.add_batches() = batches_[step];
      return workers_[0].client->SubmitBatches(request).status();
    });
  }

  /// What a worker sends to register (again: RegisterWorker is
  /// idempotent).
  v1::RegisterWorkerRequest Registration(const SimulatedWorker& worker) const {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(worker.worker_id);
    request.set_node_name(worker.node_name);
    request.set_num_ranks(options_.ranks_per_worker);
    request.set_gpu_kind("H200");
    request.set_address(absl::StrCat(worker.node_name, ":29500"));
    request.set_backend("nccl");
    request.set_max_cached_groups(kDefaultNcclMaxCachedGroups);
    return request;
  }

  /// Every worker registers its node and ranks.
  void RegisterWorkers() {
    Phase phase = RunPhase(
        options_.workers, options_.threads, [&](int w, ThreadLog& thread_log) {
          SimulatedWorker& worker = workers_[w];
          const v1::RegisterWorkerRequest request = Registration(worker);
          absl::StatusOr<v1::RegisterWorkerResponse> response =
              TimedCall(thread_log,
                        [&] { return worker.client->RegisterWorker(request); });
          if (!response.ok()) {
            thread_log.Fail(absl::StrCat("RegisterWorker ", worker.worker_id),
                            response.status());
            return;
          }
          worker.first_rank = response->first_rank();
        });
    AddPhase(kRegisterWorker, phase);
  }

  void CheckWorld() {
    CallOnce(kListWorkers, [&]() -> absl::Status {
      absl::StatusOr<v1::ListWorkersResponse> listed =
          workers_[0].client->ListWorkers(v1::ListWorkersRequest());
      if (!listed.ok()) return listed.status();
      world_complete_ = listed->world_complete();
      return absl::OkStatus();
    });
    if (!world_complete_) {
      result_.problems.push_back(
          absl::StrCat("the world is not complete after ", options_.workers,
                       " workers registered; no steps were run"));
    }
  }

  /// Every worker submits its micro-benchmark samples at once, as every
  /// rank does at startup (a different slice of one synthetic profile
  /// each).
  absl::Status SubmitProfiles() {
    absl::StatusOr<CostModel> truth = CostModel::CreateDefault(model_, cluster_);
    if (!truth.ok()) return truth.status();
    const std::vector<ProfileSample> pool =
        SyntheticProfile(*truth, options_.seed, /*relative_noise=*/0.05);
    const size_t stride =
        std::max<size_t>(1, pool.size() / options_.profile_samples);
    Phase phase = RunPhase(
        options_.workers, options_.threads, [&](int w, ThreadLog& thread_log) {
          SimulatedWorker& worker = workers_[w];
          v1::SubmitProfileRequest request;
          request.set_worker_id(worker.worker_id);
          for (int i = 0; i < options_.profile_samples; ++i) {
            *request.add_samples() = ProfileSampleToProto(
                pool[(i * stride + static_cast<size_t>(w) % stride) %
                     pool.size()]);
          }
          absl::StatusOr<v1::SubmitProfileResponse> response =
              TimedCall(thread_log,
                        [&] { return worker.client->SubmitProfile(request); });
          if (!response.ok()) {
            thread_log.Fail(absl::StrCat("SubmitProfile ", worker.worker_id),
                            response.status());
          }
        });
    AddPhase(kSubmitProfile, phase);
    result_.profile_fits = counting_metrics_->profile_fits();
    return absl::OkStatus();
  }

  // --- Steps ---------------------------------------------------------------

  void RunStep(int k) {
    if (options_.ahead && k + 1 < options_.steps) Submit(k + 1);
    LoadTestStep step;
    step.step = k;
    step.samples = batches_[k].samples_size();
    for (const v1::Sample& sample : batches_[k].samples()) {
      step.tokens += sample.length_tokens();
    }
    step.planned_before_fetch = counting_metrics_->Find(k).has_value();
    FetchPlans(k, step);
    CheckSamePlans(k);
    if (options_.train_seconds > 0) {
      absl::SleepFor(absl::Seconds(options_.train_seconds));
    }
    Report(k, step);
    result_.steps.push_back(step);
  }

  /// Worker `w` fetches step `k`'s plan: by step and fingerprint (the batch
  /// is known from SubmitBatches or worker 0's GetPlan), or with the whole
  /// batch; then makes its reports from it.
  void FetchPlan(int k, int w, bool with_batch, ThreadLog& thread_log,
                 LoadTestStep& step) {
    SimulatedWorker& worker = workers_[w];
    worker.reports.clear();
    worker.plan_digest.reset();
    if (!thread_log.get_plan_request.has_value()) {
      thread_log.get_plan_request.emplace();
      if (with_batch) {
        *thread_log.get_plan_request->mutable_batch() = batches_[k];
      } else {
        thread_log.get_plan_request->set_step(k);
        thread_log.get_plan_request->set_batch_fingerprint(
            BatchFingerprint(batches_[k]));
      }
    }
    v1::GetPlanRequest& request = *thread_log.get_plan_request;
    request.set_worker_id(worker.worker_id);
    const auto fail = [&](const absl::Status& status) {
      thread_log.Fail(absl::StrCat("GetPlan ", worker.worker_id, " step ", k),
                      status);
    };
    // This worker's decoded response: its own (dropped after use, as a
    // worker would) or the thread's.
    std::optional<v1::GetPlanResponse> own_response;
    const v1::GetPlanResponse* response = &thread_log.response;
    size_t digest = thread_log.plan_digest;
    if (options_.decode_every_plan) {
      // What dcp_worker does: the client library decodes the response.
      absl::StatusOr<v1::GetPlanResponse> fetched = TimedCall(
          thread_log, [&] { return worker.client->GetPlan(request); });
      if (!fetched.ok()) {
        fail(fetched.status());
        return;
      }
      own_response = *std::move(fetched);
      response = &*own_response;
      digest = PlanDigest(response->plan());
    } else {
      // Every byte still reaches every worker, but a thread decodes a
      // response only when it differs from the last one it decoded.
      absl::StatusOr<std::string> bytes = TimedCall(thread_log, [&] {
        return worker.client->GetSerializedPlan(request);
      });
      if (!bytes.ok()) {
        fail(bytes.status());
        return;
      }
      if (thread_log.response_bytes.empty() ||
          *bytes != thread_log.response_bytes) {
        thread_log.response_bytes.clear();
        if (!thread_log.response.ParseFromString(*bytes)) {
          fail(absl::DataLossError("the response is not a GetPlanResponse"));
          return;
        }
        thread_log.plan_digest = PlanDigest(thread_log.response.plan());
        thread_log.response_bytes = *std::move(bytes);
      }
      digest = thread_log.plan_digest;
    }
    worker.plan_digest = digest;
    MakeReports(*response, k, options_.ranks_per_worker, options_, worker,
                thread_log);
    // The last worker's request is the mode's (worker 0's may carry the
    // batch without --ahead).
    if (w == options_.workers - 1) {
      step.get_plan_request_bytes =
          static_cast<int64_t>(request.ByteSizeLong());
      step.get_plan_response_bytes =
          static_cast<int64_t>(response->ByteSizeLong());
      step.predicted_step_seconds = response->plan().predicted_step_seconds();
    }
  }

  /// Step 0 with --register-while-planning: re-registrations on a client
  /// thread of their own while the GetPlans run, as a phase of their own.
  Phase Reregister() {
    return RunPhase(
        options_.register_while_planning, /*threads=*/1,
        [&](int i, ThreadLog& thread_log) {
          SimulatedWorker& worker = workers_[i % options_.workers];
          const v1::RegisterWorkerRequest request = Registration(worker);
          absl::StatusOr<v1::RegisterWorkerResponse> response = TimedCall(
              thread_log,
              [&] { return worker.client->RegisterWorker(request); });
          if (!response.ok()) {
            thread_log.Fail(
                absl::StrCat("RegisterWorker (again) ", worker.worker_id),
                response.status());
          }
        });
  }

  /// Only the re-registrations sent while step 0 was still being planned
  /// count.
  void AddReregistrations(const Phase& reregistrations) {
    const std::optional<CountingPlannerMetrics::Planned> planned_0 =
        counting_metrics_->Find(0);
    LatencyRow& row = rows_[kRegisterWhilePlanning];
    row.throughput = false;
    Absorb(reregistrations, row);
    for (const CallRecord& call : reregistrations.merged.calls) {
      if (planned_0.has_value() && call.start < planned_0->at) {
        row.Add(call.ms);
      }
    }
    if (row.ms.empty()) {
      result_.problems.push_back(
          "no re-registration was sent while step 0 was being planned; use "
          "--ahead=false --get-plan-with-batch (and a larger world or "
          "batch)");
    }
  }

  /// Every worker fetches step `k`'s plan; the calls go into the GetPlan
  /// rows and `step`.
  void FetchPlans(int k, LoadTestStep& step) {
    Phase reregistrations;
    std::thread reregister;
    if (k == 0 && options_.register_while_planning > 0) {
      reregister = std::thread([&] { reregistrations = Reregister(); });
    }
    const double process_cpu_start = ProcessCpuSeconds();
    Phase fetch;
    if (options_.get_plan_with_batch) {
      fetch = RunPhase(options_.workers, options_.threads,
                       [&](int w, ThreadLog& thread_log) {
                         FetchPlan(k, w, /*with_batch=*/true, thread_log, step);
                       });
    } else {
      int first_by_step = 0;
      if (!options_.ahead) {
        // Nothing submitted ahead: worker 0's GetPlan carries the batch and
        // plans the step, then the others fetch it by step.
        fetch = RunPhase(1, 1, [&](int, ThreadLog& thread_log) {
          FetchPlan(k, 0, /*with_batch=*/true, thread_log, step);
        });
        first_by_step = 1;
      }
      MergePhase(fetch,
                 RunPhase(options_.workers - first_by_step, options_.threads,
                          [&](int i, ThreadLog& thread_log) {
                            FetchPlan(k, first_by_step + i,
                                      /*with_batch=*/false, thread_log, step);
                          }));
    }
    if (reregister.joinable()) {
      reregister.join();
      AddReregistrations(reregistrations);
    }
    get_plan_process_cpu_ += ProcessCpuSeconds() - process_cpu_start;
    get_plan_client_cpu_ += fetch.merged.cpu_seconds;
    get_plan_calls_ +=
        static_cast<int64_t>(fetch.merged.calls.size()) + fetch.merged.failures;
    Absorb(fetch, rows_[kGetPlan]);
    rows_[kGetPlanHit].throughput = false;
    rows_[kGetPlanWaited].throughput = false;
    const std::optional<CountingPlannerMetrics::Planned> planned =
        counting_metrics_->Find(k);
    if (planned.has_value() && planned->times == 1) {
      step.plan_ms = planned->plan_ms;
    }
    if (fetch.merged.calls.empty()) return;
    absl::Time first = absl::InfiniteFuture();
    absl::Time last = absl::InfinitePast();
    for (const CallRecord& call : fetch.merged.calls) {
      rows_[kGetPlan].Add(call.ms);
      if (call.start < first) {
        first = call.start;
        step.first_get_plan_ms = call.ms;
      }
      last = std::max(last, call.start + absl::Milliseconds(call.ms));
      // A call sent before the plan was logged waited for planning.
      if (planned.has_value() && call.start >= planned->at) {
        ++step.cache_hits;
        rows_[kGetPlanHit].Add(call.ms);
      } else {
        ++step.waited_for_planning;
        rows_[kGetPlanWaited].Add(call.ms);
      }
    }
    step.fetch_all_ms = absl::ToDoubleMilliseconds(last - first);
  }

  /// Every worker must have got the same plan.
  void CheckSamePlans(int k) {
    std::optional<size_t> reference;
    for (const SimulatedWorker& worker : workers_) {
      if (!worker.plan_digest.has_value()) continue;
      if (!reference.has_value()) reference = worker.plan_digest;
      if (*worker.plan_digest != *reference) {
        result_.problems.push_back(
            absl::StrCat(worker.worker_id, " got a different plan for step ",
                         k, " than other workers"));
        break;
      }
    }
  }

  /// Every rank reports what it "measured".
  void Report(int k, LoadTestStep& step) {
    Phase report = RunPhase(
        options_.workers, options_.threads, [&](int w, ThreadLog& thread_log) {
          SimulatedWorker& worker = workers_[w];
          if (worker.reports.empty()) return;
          const absl::Time worker_start = absl::Now();
          for (const v1::ReportStepStatsRequest& request : worker.reports) {
            absl::StatusOr<v1::ReportStepStatsResponse> response = TimedCall(
                thread_log,
                [&] { return worker.client->ReportStepStats(request); });
            if (!response.ok()) {
              thread_log.Fail(
                  absl::StrCat("ReportStepStats ", worker.worker_id, " step ",
                               k, " rank ", request.rank()),
                  response.status());
            }
          }
          thread_log.per_worker_ms.push_back(
              absl::ToDoubleMilliseconds(absl::Now() - worker_start));
        });
    step.report_all_ms = 1e3 * report.wall_seconds;
    AddPhase(kReportStepStats, report);
    LatencyRow& per_worker = rows_[kReportPerWorker];
    per_worker.wall_seconds += report.wall_seconds;
    for (double ms : report.merged.per_worker_ms) per_worker.Add(ms);
  }

  // --- What the planner says it did ---------------------------------------

  void ReadPlannerCounts() {
    result_.plans_computed = counting_metrics_->plans_computed();
    if (server_->metrics_port() > 0) {
      const std::string exposition = HttpGet(server_->metrics_port(), "/metrics");
      if (std::optional<double> plans =
              MetricValue(exposition, metric_names::kPlansTotal);
          plans.has_value()) {
        result_.plans_total_metric = static_cast<int64_t>(*plans);
      }
      const std::map<std::string, std::string> method_label = {
          {metric_names::kMethodLabel, "GetPlan"}};
      std::optional<double> sum = MetricValue(
          exposition, absl::StrCat(metric_names::kRpcLatencySeconds, "_sum"),
          method_label);
      std::optional<double> count = MetricValue(
          exposition, absl::StrCat(metric_names::kRpcLatencySeconds, "_count"),
          method_label);
      if (sum.has_value() && count.has_value() && *count > 0) {
        result_.server_get_plan_mean_ms = 1e3 * *sum / *count;
      }
    }
    for (const std::string& failure : counting_metrics_->failures()) {
      result_.problems.push_back(failure);
    }
    if (world_complete_ && result_.plans_computed != options_.steps) {
      result_.problems.push_back(absl::StrCat(
          "the planner computed ", result_.plans_computed, " plans for ",
          options_.steps, " steps; each step must be planned exactly once"));
    }
    for (const LoadTestStep& step : result_.steps) {
      const std::optional<CountingPlannerMetrics::Planned> planned =
          counting_metrics_->Find(step.step);
      if (world_complete_ && (!planned.has_value() || planned->times != 1)) {
        result_.problems.push_back(
            absl::StrCat("step ", step.step, " was planned ",
                         planned.has_value() ? planned->times : 0, " times"));
      }
    }
  }

  const LoadTestOptions& options_;
  const std::function<void(const std::string&)>& log_;
  absl::Time test_start_;
  double cpu_start_ = 0;
  LoadTestResult result_;
  ModelSpec model_;
  ClusterSpec cluster_;
  std::vector<v1::GlobalBatch> batches_;
  // Declared before the server: it outlives it.
  std::unique_ptr<CountingPlannerMetrics> counting_metrics_;
  std::unique_ptr<PlannerServer> server_;
  std::vector<std::unique_ptr<GrpcPlannerClient>> clients_;
  std::vector<SimulatedWorker> workers_;
  std::map<std::string, LatencyRow> rows_;
  bool world_complete_ = false;
  double get_plan_process_cpu_ = 0;
  double get_plan_client_cpu_ = 0;
  int64_t get_plan_calls_ = 0;
};

}  // namespace

absl::StatusOr<LoadTestResult> RunLoadTest(
    const LoadTestOptions& options,
    const std::function<void(const std::string&)>& log) {
  if (absl::Status valid = ValidateOptions(options); !valid.ok()) return valid;
  LoadTestRun run(options, log);
  return run.Run();
}

}  // namespace dcp
