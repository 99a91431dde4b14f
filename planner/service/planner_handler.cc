// The root of the planner's service logic: PlannerHandler::Create composes
// the managers below and routes each request through them. The managers and
// what each owns (one concept, one mutex each; see their headers):
//
//   request_validation.h    pure checks, one per request (no state)
//   worker_registry.h       workers, node slots, liveness
//   cost_params_registry.h  parameter versions and the current fit
//   profile_fitter.h        profile slots and coalesced fits
//   plan_cache.h            each step's plan (step_plan.h makes one), the
//                           batches submitted ahead, background planning
//   step_stats_tracker.h    step reports and the online-refit sums
//   planner_state_store.h   typed durable records, read once at start
//   step_reports_writer.h   step reports and plan records, written off the
//                           RPC path
//
// The one rule: no manager calls another while holding its own state
// mutex; what crosses between managers is an immutable snapshot
// (CostParamsSnapshot, ParamsVersion, PlannedStep). The root holds no lock at
// all. The only lock held across a call into another manager is the
// profile fitter's fit turn (around CostParamsRegistry::ApplyFit, which
// calls nothing back), so there is no lock cycle. Disk writes happen under
// a manager's "turn" mutex for that kind of update (registrations, new
// versions, profiles, compactions), never under the state mutex that reads
// such as GetPlan take.

#include "planner/service/planner_handler.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/byte_format.h"
#include "common/status_macros.h"
#include "cost_model/cost_model.h"
#include "planner/client/batch_fingerprint.h"
#include "planner/client/proto_convert.h"
#include "planner/plan/batch_check.h"
#include "planner/service/cost_params_registry.h"
#include "planner/service/plan_cache.h"
#include "planner/service/planner_state_store.h"
#include "planner/service/profile_fitter.h"
#include "planner/service/request_validation.h"
#include "planner/service/step_reports_writer.h"
#include "planner/service/step_stats_tracker.h"
#include "planner/service/worker_registry.h"

namespace dcp {
namespace {

/// What in `options` decides plans (besides the model, cluster and
/// parameters), for the job record.
v1::PlannerOptionsRecord PlannerOptionsToRecord(const PlannerOptions& options) {
  v1::PlannerOptionsRecord record;
  record.set_variable_accumulation(options.variable_accumulation);
  record.set_pyramid_recompute(options.pyramid_recompute);
  for (int size : options.sp_sizes) record.add_sp_sizes(size);
  record.set_strategy_name(options.strategy_name);
  record.set_static_workload_max_length_tokens(
      options.static_options.workload_max_length_tokens);
  record.set_static_micro_batch_sequences(
      options.static_options.micro_batch_sequences);
  record.set_static_sp_size(options.static_options.sp_size);
  return record;
}

}  // namespace

std::string MemoryBudgetShareSource(absl::string_view share,
                                    int64_t budget_bytes) {
  return absl::StrCat(share, " of dcp_planner --memory-budget=",
                      FormatBytes(static_cast<double>(budget_bytes)));
}

namespace {

/// `writer` (null: none) writes the plan records off the planning caller's
/// thread.
PlanCacheOptions MakePlanCacheOptions(const PlannerHandlerOptions& options,
                                      StepReportsWriter* writer) {
  PlanCacheOptions cache;
  if (writer != nullptr) {
    cache.record_plan = [writer](v1::StepPlanRecord record) {
      writer->WritePlan(std::move(record));
    };
  }
  cache.planner_options = options.planner_options;
  cache.world_size = options.cluster.NumGpus();
  cache.plan_cache_steps = options.plan_cache_steps;
  cache.background_planning_threads = options.background_planning_threads;
  cache.pending_bytes_budget = options.memory_budget_bytes / 4;
  cache.cached_bytes_budget = options.memory_budget_bytes / 4;
  cache.pending_bytes_budget_source =
      MemoryBudgetShareSource("a quarter", options.memory_budget_bytes);
  cache.pending_planning_seconds_budget =
      absl::ToDoubleSeconds(options.max_queued_planning);
  cache.make_step_plan = options.make_step_plan;
  return cache;
}

/// The PlannerHandler behind PlannerHandler::Create: the managers and the
/// order in which a request visits them. Thread-safe; holds no lock itself.
class PlannerHandlerRoot final : public PlannerHandler {
 public:
  PlannerHandlerRoot(PlannerHandlerOptions options, const Clock& clock,
                     PlannerMetrics* metrics,
                     std::function<void(const std::string&)> log,
                     std::unique_ptr<PlannerStateStore> store,
                     std::shared_ptr<const CostModel> default_model)
      : options_(std::move(options)),
        metrics_(metrics != nullptr ? metrics : &noop_metrics_),
        log_(std::move(log)),
        store_(std::move(store)),
        world_size_(options_.cluster.NumGpus()),
        report_writer_(store_ != nullptr
                           ? std::make_unique<StepReportsWriter>(*store_, log_)
                           : nullptr),
        workers_(options_.model, options_.cluster,
                 options_.worker_liveness_timeout, clock, store_.get(),
                 *metrics_, log_, options_.job_id),
        params_(options_.model, options_.cluster, std::move(default_model),
                store_.get()),
        profiles_(options_.model, options_.cluster, params_, store_.get(),
                  *metrics_, log_),
        plans_(MakePlanCacheOptions(options_, report_writer_.get()), params_,
               clock, store_.get(), *metrics_, log_,
               [this](const std::vector<int64_t>& steps) {
                 stats_.Forget(steps);
               }),
        stats_(world_size_, options_.online_refit,
               /*record_reports=*/store_ != nullptr, options_.micro_batch_refit,
               options_.refit_warmup_steps) {}

  ~PlannerHandlerRoot() override { Shutdown(); }

  absl::Status Load(PlannerState state) {
    DCP_RETURN_IF_ERROR(workers_.Load(state.workers));
    DCP_RETURN_IF_ERROR(params_.Load(state.params_versions));
    profiles_.Load(std::move(state.profiles));
    return plans_.Load(state.steps, state.compacted_steps);
  }
  void Start() { plans_.Start(); }

  absl::Status RecordJob() override {
    if (store_ == nullptr) return absl::OkStatus();
    if (absl::Status status = store_->RecordJob(); !status.ok()) {
      return PersistError("the job", status);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) override {
    DCP_RETURN_IF_ERROR(
        ValidateRegisterWorkerRequest(request, options_.cluster.gpus_per_node));
    absl::StatusOr<v1::RegisterWorkerResponse> response =
        workers_.Register(request);
    if (!response.ok()) return response.status();
    // The workers' backend and group cache bound decide the communicators
    // the memory model counts (every worker gives the same: the registry
    // refuses others). Set before this worker can submit a batch.
    if (!request.backend().empty()) {
      MemoryParams communicators;
      SetCommunicatorMemory(request.backend() == "nccl"
                                ? CommunicatorBackend::kNccl
                                : CommunicatorBackend::kGloo,
                            request.max_cached_groups(), communicators);
      absl::StatusOr<std::optional<int64_t>> version =
          params_.SetCommunicators(communicators.communicator_bytes,
                                   communicators.communicators_per_rank);
      if (!version.ok()) return version.status();
      if (version->has_value()) {
        Log(absl::StrFormat(
            "params v%d: %d communicators per rank of %.2f GB (backend %s, "
            "--max-cached-groups=%d)",
            **version, communicators.communicators_per_rank,
            communicators.communicator_bytes / 1e9, request.backend(),
            request.max_cached_groups()));
      }
    }
    if (!request.precision().empty()) {
      // Both names were validated (ValidateRegisterWorkerRequest).
      absl::StatusOr<std::optional<int64_t>> version = params_.SetTrainingState(
          *TrainingPrecisionFromName(request.precision()),
          *ParameterShardingFromName(request.optimizer_sharding()));
      if (!version.ok()) return version.status();
      if (version->has_value()) {
        const MemoryParams& state =
            params_.Snapshot()->current->cost_model->params().memory;
        Log(absl::StrFormat(
            "params v%d: training state %s with optimizer sharding %s "
            "(%.0f + %.0f + %.0f bytes per parameter: weights, gradients, "
            "optimizer)",
            **version, request.precision(), request.optimizer_sharding(),
            state.weight_bytes_per_parameter,
            state.gradient_bytes_per_parameter,
            state.optimizer_bytes_per_parameter));
      }
    }
    return response;
  }

  absl::StatusOr<v1::SubmitProfileResponse> SubmitProfile(
      const v1::SubmitProfileRequest& request) override {
    DCP_RETURN_IF_ERROR(ValidateSubmitProfileRequest(request));
    // One profile per registered worker: a stale or mistyped id must not
    // add a slot that every later fit would count. (Checked after the
    // samples, as before: their errors come first.)
    DCP_RETURN_IF_ERROR(profiles_.CheckSamples(request));
    DCP_RETURN_IF_ERROR(
        workers_.Touch({request.worker_id(), request.incarnation()},
                       /*activity=*/false, /*step=*/-1));
    DCP_RETURN_IF_ERROR(profiles_.Submit(request));
    std::shared_ptr<const CostParamsSnapshot> params = params_.Snapshot();
    v1::SubmitProfileResponse response;
    for (const ModelFitReport& report : params->reports) {
      *response.add_reports() = FitReportToProto(report);
    }
    response.set_params_version(params->current->version);
    return response;
  }

  absl::StatusOr<v1::SubmitBatchesResponse> SubmitBatches(
      const v1::SubmitBatchesRequest& request) override {
    absl::StatusOr<SubmittedBatches> batches =
        ValidateSubmitBatchesRequest(request);
    if (!batches.ok()) return batches.status();
    DCP_RETURN_IF_ERROR(
        workers_.Touch({request.worker_id(), request.incarnation()},
                       /*activity=*/false, /*step=*/-1));
    DCP_RETURN_IF_ERROR(plans_.Submit(request, *batches));
    v1::SubmitBatchesResponse response;
    response.set_accepted(request.batches_size());
    return response;
  }

  absl::StatusOr<v1::GetPlanResponse> GetPlan(
      const v1::GetPlanRequest& request) override {
    absl::StatusOr<std::shared_ptr<const PlannedStep>> plan =
        PlanForRequest(request);
    if (!plan.ok()) return plan.status();
    if (ByFingerprint(request)) {
      v1::GetPlanResponse response = *(*plan)->response;
      response.clear_sample_ids();
      return response;
    }
    return *(*plan)->response;
  }

  absl::StatusOr<std::shared_ptr<const std::string>> GetSerializedPlan(
      const v1::GetPlanRequest& request) override {
    absl::StatusOr<std::shared_ptr<const PlannedStep>> plan =
        PlanForRequest(request);
    if (!plan.ok()) return plan.status();
    return ByFingerprint(request) ? (*plan)->serialized_without_sample_ids
                                  : (*plan)->serialized;
  }

  absl::StatusOr<v1::ReportStepStatsResponse> ReportStepStats(
      const v1::ReportStepStatsRequest& request) override {
    DCP_RETURN_IF_ERROR(ValidateReportStepStatsRequest(request, world_size_));
    DCP_RETURN_IF_ERROR(
        workers_.CheckReport({request.worker_id(), request.incarnation()},
                             request.step(), request.rank()));
    absl::StatusOr<std::shared_ptr<const PlannedStep>> plan =
        plans_.ReadyPlan(request.step());
    if (!plan.ok()) return plan.status();
    std::shared_ptr<const CostParamsSnapshot> params = params_.Snapshot();
    const std::shared_ptr<const ParamsVersion> plan_version =
        params_.Version((*plan)->params_version);
    // What the plan's version applied to the compute at SP >= 2 beyond its
    // compute correction.
    const double fitted_sp_scale =
        params->fitted_params.compute.sp_compute_scale;
    const double plan_sp_correction =
        fitted_sp_scale > 0
            ? plan_version->cost_model->params().compute.sp_compute_scale /
                  fitted_sp_scale
            : 1.0;
    absl::StatusOr<StepStatsTracker::Outcome> outcome = stats_.Record(
        request, **plan, plan_version->compute_correction, *params,
        plan_version->communication_correction, plan_sp_correction);
    if (!outcome.ok()) return outcome.status();
    // For tools only (step_state_files.h), written off this call's path.
    for (v1::StepReportsRecord& record : outcome->reports_to_record) {
      report_writer_->Write(std::move(record));
    }
    if (outcome->refit_factor.has_value()) {
      MaybeRefit(*outcome, params->current->compute_correction);
    }
    metrics_->StepMeasured(request.rank(), request.step_seconds());
    if (outcome->relative_error.has_value()) {
      metrics_->CostModelError(*outcome->relative_error);
    }
    if (outcome->imbalance.has_value()) {
      metrics_->StepImbalance(*outcome->imbalance);
    }
    v1::ReportStepStatsResponse response;
    response.set_measured_over_predicted(outcome->measured_over_predicted);
    return response;
  }

  absl::StatusOr<v1::GetClusterModelResponse> GetClusterModel(
      const v1::GetClusterModelRequest& request) override {
    std::shared_ptr<const CostParamsSnapshot> params = params_.Snapshot();
    std::shared_ptr<const ParamsVersion> version = params->current;
    if (request.params_version() != 0) {
      version = params_.Version(request.params_version());
      if (version == nullptr) {
        return absl::NotFoundError(absl::StrCat(
            "params_version = ", request.params_version(),
            ": the planner has no such cost-parameter version (current: ",
            params->current->version, "); ask for 0 for the current one"));
      }
    }
    v1::GetClusterModelResponse response;
    *response.mutable_model() = ModelSpecToProto(options_.model);
    *response.mutable_cluster() = ClusterSpecToProto(options_.cluster);
    *response.mutable_params() =
        CostParamsToProto(version->cost_model->params());
    for (const ModelFitReport& report : params->reports) {
      *response.add_reports() = FitReportToProto(report);
    }
    response.set_params_version(version->version);
    response.set_using_default_params(version->defaults);
    response.set_step_relative_error(stats_.MeanRelativeError());
    return response;
  }

  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest&) override {
    return workers_.List();
  }

  void Shutdown() override {
    plans_.Shutdown();
    if (report_writer_ != nullptr) report_writer_->Flush();
  }

 private:
  void Log(const std::string& line) const {
    if (log_) log_(line);
  }

  /// The client holds the batch and named it by fingerprint: the plan is
  /// sent without sample ids.
  static bool ByFingerprint(const v1::GetPlanRequest& request) {
    return request.batch().samples_size() == 0 &&
           request.batch_fingerprint() != 0;
  }

  static WorkerCaller Caller(const v1::GetPlanRequest& request) {
    return {request.worker_id(), request.incarnation()};
  }

  // GetPlan: with the batch's samples, or by step.
  absl::StatusOr<std::shared_ptr<const PlannedStep>> PlanForRequest(
      const v1::GetPlanRequest& request) {
    if (request.batch().samples().empty()) {
      DCP_RETURN_IF_ERROR(ValidateGetPlanByStep(request));
      DCP_RETURN_IF_ERROR(
          workers_.CheckCanServe(Caller(request), request.step()));
      return plans_.PlanByStep(request.step(), request.batch_fingerprint());
    }
    const v1::GlobalBatch& batch = request.batch();
    // Cheap (a few multiplies per sample); checked first so that a step
    // that is already planned is served without validating or copying its
    // batch (the recorded batch with this fingerprint was validated when it
    // was first seen).
    const uint64_t fingerprint = BatchFingerprint(batch);
    DCP_RETURN_IF_ERROR(ValidateGetPlanWithBatch(request, fingerprint));
    if (std::optional<StepPlanFuture> planning =
            plans_.Find(batch.step(), fingerprint)) {
      DCP_RETURN_IF_ERROR(
          workers_.CheckCanServe(Caller(request), batch.step()));
      return PlanCache::Await(*planning);
    }
    DCP_RETURN_IF_ERROR(ValidateGlobalBatch(batch, "batch"));
    DCP_RETURN_IF_ERROR(workers_.CheckCanServe(Caller(request), batch.step()));
    DCP_RETURN_IF_ERROR(plans_.CheckFingerprint(batch.step(), fingerprint));
    return plans_.Plan(std::make_shared<const v1::GlobalBatch>(batch),
                       fingerprint);
  }

  void MaybeRefit(const StepStatsTracker::Outcome& outcome, double current) {
    auto pair_of = [](const std::optional<AllToAllRefitAccumulator::Fit>& fit)
        -> std::optional<std::pair<double, double>> {
      if (!fit.has_value()) return std::nullopt;
      return std::make_pair(fit->latency_seconds, fit->bus_bytes_per_second);
    };
    absl::StatusOr<std::optional<int64_t>> version = params_.ApplyRefit(
        outcome.refit_epoch, *outcome.refit_factor,
        RefitAccumulator::kChangeThreshold, outcome.communication_refit_factor,
        pair_of(outcome.all_to_all_intra), pair_of(outcome.all_to_all_inter),
        outcome.micro_batch_fit, outcome.sp_compute_scale);
    if (!version.ok()) {
      Log(absl::StrCat("online refit not applied: ",
                       version.status().message()));
      return;
    }
    if (!version->has_value()) return;
    std::string all_to_all;
    for (const auto& [kind, fit] :
         {std::make_pair("inside nodes", outcome.all_to_all_intra),
          std::make_pair("across nodes", outcome.all_to_all_inter)}) {
      if (fit.has_value()) {
        absl::StrAppend(
            &all_to_all,
            absl::StrFormat("; all-to-all %s fitted to %.1f us + bytes / "
                            "%.3g B/s",
                            kind, 1e6 * fit->latency_seconds,
                            fit->bus_bytes_per_second));
      }
    }
    if (outcome.micro_batch_fit.has_value()) {
      const auto& [scale, a, b, c] = *outcome.micro_batch_fit;
      Log(absl::StrFormat(
          "params v%d: online micro-batch refit: compute rates scaled by "
          "%.3f (was %.3f), fixed %.3g s per micro-batch, %.3g s per layer "
          "pass, %.3g s per sequence per layer pass, from %d micro-batch "
          "measurements%s",
          **version, scale, current, a, b, c, outcome.micro_batch_fit_rows,
          all_to_all));
      return;
    }
    const std::string sp =
        outcome.sp_compute_scale.has_value()
            ? absl::StrFormat(" (at SP 1; at SP >= 2 by %.3f more)",
                              *outcome.sp_compute_scale)
            : "";
    Log(absl::StrFormat(
        "params v%d: online refit scales compute time by %.3f%s (was %.3f) "
        "from %d micro-batch measurements%s",
        **version, *outcome.refit_factor, sp, current,
        outcome.refit_observations, all_to_all));
  }

  const PlannerHandlerOptions options_;
  NoopPlannerMetrics noop_metrics_;
  PlannerMetrics* const metrics_;
  const std::function<void(const std::string&)> log_;
  /// Null when state is kept in memory only.
  const std::unique_ptr<PlannerStateStore> store_;
  const int world_size_;
  /// Null when state is kept in memory only. Writes step reports and plan
  /// records off the request path; made before and destroyed after the
  /// plan cache, which hands it plan records.
  const std::unique_ptr<StepReportsWriter> report_writer_;

  WorkerRegistry workers_;
  CostParamsRegistry params_;
  ProfileFitter profiles_;
  PlanCache plans_;
  StepStatsTracker stats_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PlannerHandler>> PlannerHandler::Create(
    PlannerHandlerOptions options, const Clock& clock, PlannerMetrics* metrics,
    std::function<void(const std::string&)> log) {
  absl::StatusOr<CostModel> default_model =
      CostModel::CreateDefault(options.model, options.cluster);
  if (!default_model.ok()) return default_model.status();
  if (absl::StatusOr<std::vector<int>> sizes =
          LegalSpSizes(*default_model, options.planner_options.sp_sizes);
      !sizes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("planner_options.sp_sizes: ", sizes.status().message()));
  }
  if (options.plan_cache_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan_cache_steps = ", options.plan_cache_steps,
                     "; keep at least 1 plan"));
  }
  if (options.background_planning_threads < 0 ||
      options.background_planning_threads > kMaxBackgroundPlanningThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "background_planning_threads = ", options.background_planning_threads,
        "; use 0 (plan on demand) to ", kMaxBackgroundPlanningThreads));
  }
  if (options.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory_budget_bytes = ", options.memory_budget_bytes,
                     "; give the planner's memory (0: no bound)"));
  }
  if (options.max_queued_planning < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queued_planning = ",
                     absl::FormatDuration(options.max_queued_planning),
                     "; it must not be negative (0: no bound)"));
  }
  if (!options.job_id.empty()) {
    DCP_RETURN_IF_ERROR(ValidateIdentifier("job_id", options.job_id,
                                           "the launcher's job name"));
  }
  if (options.worker_liveness_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_liveness_timeout = ",
                     absl::FormatDuration(options.worker_liveness_timeout),
                     "; it must be positive"));
  }
  std::unique_ptr<PlannerStateStore> store;
  PlannerState state;
  if (!options.state_dir.empty()) {
    v1::JobRecord job;
    *job.mutable_model() = ModelSpecToProto(options.model);
    *job.mutable_cluster() = ClusterSpecToProto(options.cluster);
    *job.mutable_planner() = PlannerOptionsToRecord(options.planner_options);
    job.set_batch_fingerprint_version(kBatchFingerprintVersion);
    absl::StatusOr<std::unique_ptr<PlannerStateStore>> opened =
        PlannerStateStore::Open(options.state_dir, job, &state);
    if (!opened.ok()) return opened.status();
    store = *std::move(opened);
    // Records set aside rather than refusing to start: one line each.
    if (log) {
      for (const std::string& line : state.set_aside) log(line);
    }
  }
  auto handler = std::make_unique<PlannerHandlerRoot>(
      std::move(options), clock, metrics, std::move(log), std::move(store),
      std::make_shared<const CostModel>(*std::move(default_model)));
  DCP_RETURN_IF_ERROR(handler->Load(std::move(state)));
  handler->Start();
  return handler;
}

}  // namespace dcp
