#ifndef DCP_PLANNER_SERVICE_PLANNER_HANDLER_H_
#define DCP_PLANNER_SERVICE_PLANNER_HANDLER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/model_spec.h"
#include "dcp/v1/planner_service.pb.h"
#include "planner/client/planner_rpcs.h"
#include "planner/search/planner.h"
#include "planner/service/planner_metrics.h"
#include "planner/service/step_plan.h"

namespace dcp {

/// The most background planning threads a handler runs.
inline constexpr int kMaxBackgroundPlanningThreads = 64;

struct PlannerHandlerOptions {
  ModelSpec model;
  /// The expected world: num_nodes x gpus_per_node ranks.
  ClusterSpec cluster;
  PlannerOptions planner_options;
  /// Where state that must survive a restart is written atomically, as
  /// typed records read once at start (planner_state_store.h): one per
  /// registered worker, parameter version and profile; each step's batch
  /// fingerprint and parameter version while the step is within the last
  /// `plan_cache_steps` planned (older steps keep only their version, in
  /// ranges); and the job with the fingerprint algorithm's version (a
  /// directory of another job or version, or of the earlier JSON format, is
  /// refused). Empty: memory only.
  std::string state_dir;
  /// Refit the compute model from measured step statistics.
  bool online_refit = false;
  /// With online_refit, also refit the micro-batch model's rate scale and
  /// fixed costs (dcp_planner --micro-batch-refit; experimental).
  bool micro_batch_refit = false;
  /// With online_refit, the first this many steps reported count towards
  /// the error but not the refit (they pay one-time costs; dcp_planner
  /// --refit-warmup-steps).
  int refit_warmup_steps = 0;
  /// The job this planner serves (dcp_planner --job-id): only workers
  /// registering with this job id are accepted (WorkerRegistry). Empty:
  /// workers of any job.
  std::string job_id;
  /// A worker silent for longer is reported LOST.
  absl::Duration worker_liveness_timeout = absl::Seconds(60);
  /// Threads that plan submitted batches ahead; 0 plans only on demand.
  int background_planning_threads = 1;  // 0..kMaxBackgroundPlanningThreads
  /// Plans kept in memory (oldest steps evicted first; they are re-planned
  /// identically when asked for with their batch).
  int plan_cache_steps = 64;
  /// The memory the planner may use (dcp_planner --memory-budget, set to
  /// about the pod's memory limit); a quarter of it may be held by the
  /// batches waiting to be planned, a quarter by the cached plans (the
  /// oldest are evicted beyond it), an eighth by gRPC's buffers of calls in
  /// flight and an eighth by calls parsing their batches (PlannerServer);
  /// the rest is for planning. 0: no bound.
  int64_t memory_budget_bytes = 0;
  /// The predicted planning time (PredictedPlanningSeconds) that submitted
  /// batches may queue (--max-queued-planning). Zero: no bound.
  absl::Duration max_queued_planning = absl::ZeroDuration();
  /// Makes one step's plan (step_plan.h); tests substitute a slow one.
  MakeStepPlanFunction make_step_plan = MakeStepPlan;
};

/// A share of dcp_planner --memory-budget named for messages, e.g. "a
/// quarter of dcp_planner --memory-budget=768.0 MiB".
std::string MemoryBudgetShareSource(absl::string_view share,
                                    int64_t budget_bytes);

/// The planner service's logic, free of gRPC: tests call it directly and the
/// gRPC service (grpc_planner_service.h) is a thin wrapper around it.
///
/// Each step is planned once and served to every worker from a cache; the
/// same step with the same batch always gets the same plan, also after a
/// restart from the same state directory (the plan is recomputed with the
/// parameter version recorded for that step, and the planner is
/// deterministic).
///
/// GetPlan takes the step's batch, or only the step number (and optionally
/// the batch's fingerprint, batch_fingerprint.h) of a step whose batch was
/// submitted or planned before; see GetPlanRequest in
/// proto/dcp/v1/planner_service.proto. A batch is kept only until its step
/// is planned: a step evicted from the plan cache (or planned before a
/// restart) is served by step only after the batch is sent again.
///
/// Errors: INVALID_ARGUMENT naming the field and value for bad requests,
/// RESOURCE_EXHAUSTED with the planner core's explanation for an
/// unplannable batch, FAILED_PRECONDITION while the world is incomplete
/// (saying which nodes/ranks are missing), when a step comes back with a
/// different batch or fingerprint, or when a step asked for by number is
/// unknown or no longer in memory. Thread-safe: every method may be called
/// concurrently.
///
/// Inside, Create() composes one manager per concept (worker_registry.h,
/// cost_params_registry.h, profile_fitter.h, plan_cache.h,
/// step_stats_tracker.h, with request_validation.h and
/// planner_state_store.h), each with its own mutex, and the rule is: no
/// manager calls another while holding its own lock; what crosses between
/// them is an immutable snapshot. planner_handler.cc lists them.
class PlannerHandler : public PlannerRpcs {
 public:
  /// Loads `options.state_dir` if it holds state. `clock`, `metrics` and
  /// `log` (one line per call, e.g. one per planned step) must outlive the
  /// handler; `metrics` may be null.
  static absl::StatusOr<std::unique_ptr<PlannerHandler>> Create(
      PlannerHandlerOptions options, const Clock& clock,
      PlannerMetrics* metrics, std::function<void(const std::string&)> log);

  /// The serialized GetPlanResponse, shared by every caller of the step
  /// (lets the gRPC layer send one buffer to hundreds of workers).
  virtual absl::StatusOr<std::shared_ptr<const std::string>> GetSerializedPlan(
      const v1::GetPlanRequest& request) = 0;

  /// Claims `options.state_dir` for this job (writes its job record) if no
  /// record has yet; call once the planner has started, so that a start
  /// that fails leaves a fresh directory fresh. OK without a state
  /// directory.
  virtual absl::Status RecordJob() { return absl::OkStatus(); }

  /// Abandons the plans in flight (their callers get UNAVAILABLE at once,
  /// without waiting for the planner core) and stops background planning,
  /// then writes the step reports records still waiting; later calls still
  /// work (planning on demand). Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PLANNER_HANDLER_H_
