#ifndef DCP_PLANNER_SERVICE_PLAN_CACHE_H_
#define DCP_PLANNER_SERVICE_PLAN_CACHE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "dcp/v1/planner_service.pb.h"
#include "dcp/v1/planner_state.pb.h"
#include "planner/search/planner.h"
#include "planner/service/cost_params_registry.h"
#include "planner/service/planner_metrics.h"
#include "planner/service/planner_state_store.h"
#include "planner/service/request_validation.h"
#include "planner/service/step_plan.h"

namespace dcp {

using StepPlanFuture = std::shared_future<std::shared_ptr<const PlannedStep>>;

/// The parameter version of every step that left the plan-cache window, as
/// ranges of consecutive steps with one version (versions change rarely).
/// Thread-compatible.
class StepHistory {
 public:
  StepHistory() = default;
  explicit StepHistory(const v1::CompactedStepsRecord& record);

  void Add(int64_t step, int64_t params_version);
  /// The version `step` was planned with, if it is in the history.
  std::optional<int64_t> VersionOf(int64_t step) const;
  v1::CompactedStepsRecord ToRecord() const;
  size_t num_ranges() const { return ranges_.size(); }

 private:
  struct Range {
    int64_t last_step = 0;
    int64_t params_version = 0;
  };
  /// By first step; disjoint.
  std::map<int64_t, Range> ranges_;
};

struct PlanCacheOptions {
  PlannerOptions planner_options;
  int world_size = 0;
  /// Plans kept in memory, and step records kept on disk.
  int plan_cache_steps = 64;
  int background_planning_threads = 1;
  /// Bytes that the batches waiting to be planned (and being planned) may
  /// hold in memory, as protobuf measures them; 0: no bound.
  int64_t pending_bytes_budget = 0;
  /// Where that budget comes from, for messages ("a quarter of ...").
  std::string pending_bytes_budget_source;
  /// Bytes that the cached plans (PlannedStepBytes) may hold; beyond it the
  /// oldest are evicted, as beyond `plan_cache_steps` (a step evicted is
  /// re-planned identically when asked for with its batch). The newest plan
  /// is always kept. 0: no bound.
  int64_t cached_bytes_budget = 0;
  /// Predicted planner-core seconds (PredictedPlanningSeconds) of those
  /// batches; 0: no bound.
  double pending_planning_seconds_budget = 0;
  /// Makes one step's plan; it runs on a thread of its own, which Shutdown
  /// abandons (it must not use anything but its arguments; the clock it is
  /// given reads the cache's clock while the cache lives and the system's
  /// after).
  MakeStepPlanFunction make_step_plan = MakeStepPlan;
  /// Takes a planned step's plan record (for tools only) to write it off
  /// the planning caller's thread (the handler's StepReportsWriter); it
  /// must not block. Empty: the caller writes it to the store itself.
  std::function<void(v1::StepPlanRecord)> record_plan;
};

/// Each step's plan, made once (MakeStepPlan) and shared by every request
/// for it; the batches submitted ahead and the background threads that plan
/// them; the steps' durable records.
///
/// Thread model: `mu_` guards the steps and the queue and is held only for
/// in-memory work. Planning runs outside it: the first request for a step
/// installs a shared future under `mu_`, then records the step durably and
/// has it planned on a detached thread of its own, which it waits for; every
/// other request waits on the future. Shutdown abandons the plans in flight
/// (their waiters get UNAVAILABLE at once; the detached threads finish on
/// their own, touching only their task), so that a SIGTERM never waits for
/// the planner core.
/// Step records that leave the window are compacted (StepHistory) under
/// `compact_mu_`, without `mu_`. Reads CostParamsRegistry snapshots (never
/// while holding `mu_`); `on_evicted` is called without any lock.
class PlanCache {
 public:
  /// `registry`, `clock`, `store` (may be null), `metrics` and `log` must
  /// outlive the cache. `on_evicted` gets the steps whose plans left memory.
  PlanCache(PlanCacheOptions options, const CostParamsRegistry& registry,
            const Clock& clock, PlannerStateStore* store,
            PlannerMetrics& metrics,
            std::function<void(const std::string&)> log,
            std::function<void(const std::vector<int64_t>&)> on_evicted);
  ~PlanCache();

  /// Installs a state directory's step records (before any other call),
  /// compacting those beyond the window.
  absl::Status Load(const std::vector<v1::StepRecord>& steps,
                    const v1::CompactedStepsRecord& compacted);
  /// Starts the background planning threads.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  /// Abandons the plans in flight (their requests get UNAVAILABLE, and they
  /// are not cached), stops and joins the background threads without
  /// waiting for the planner core; later requests plan on demand.
  /// Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  /// The plan of `step` if it is planning or cached with this fingerprint.
  std::optional<StepPlanFuture> Find(int64_t step, uint64_t fingerprint) const
      ABSL_LOCKS_EXCLUDED(mu_);
  /// FAILED_PRECONDITION if `step` was seen with another fingerprint.
  absl::Status CheckFingerprint(int64_t step, uint64_t fingerprint) const
      ABSL_LOCKS_EXCLUDED(mu_);
  /// Plans `batch` (a validated batch with this fingerprint) once.
  absl::StatusOr<std::shared_ptr<const PlannedStep>> Plan(
      std::shared_ptr<const v1::GlobalBatch> batch, uint64_t fingerprint)
      ABSL_LOCKS_EXCLUDED(mu_);
  /// The plan of a step asked for by number (`fingerprint` 0: any batch).
  absl::StatusOr<std::shared_ptr<const PlannedStep>> PlanByStep(
      int64_t step, uint64_t fingerprint) ABSL_LOCKS_EXCLUDED(mu_);
  /// Keeps validated batches to plan ahead; RESOURCE_EXHAUSTED beyond
  /// kMaxPendingBatches waiting, or beyond the bytes or predicted planning
  /// seconds that waiting batches may take (naming the budget).
  absl::Status Submit(const v1::SubmitBatchesRequest& request,
                      const SubmittedBatches& batches) ABSL_LOCKS_EXCLUDED(mu_);
  /// The finished, successful plan of `step` (for its reports).
  absl::StatusOr<std::shared_ptr<const PlannedStep>> ReadyPlan(int64_t step) const
      ABSL_LOCKS_EXCLUDED(mu_);

  /// Waits for `future`; its status if it failed.
  static absl::StatusOr<std::shared_ptr<const PlannedStep>> Await(
      const StepPlanFuture& future);

 private:
  struct StepEntry {
    uint64_t fingerprint = 0;
    /// Fixed once `persisted`; before that, the version current when
    /// planning starts is taken.
    int64_t params_version = 0;
    bool persisted = false;
    /// Its plan failed (the failure is cached for this fingerprint, but
    /// the step is not claimed: another batch for it replaces this one).
    bool failed = false;
    /// The batch from its submission or first request until the step's
    /// plan is cached (also after a failure to record the step), else null.
    std::shared_ptr<const v1::GlobalBatch> batch;
    /// Valid while planning runs or its result is cached.
    StepPlanFuture plan;
    /// `batch`'s share of the pending totals while it is held.
    int64_t batch_bytes = 0;
    /// The cached plan's share of `cached_bytes_` while it is cached.
    int64_t plan_bytes = 0;
    double batch_planning_seconds = 0;
  };
  /// What holding one more batch costs.
  struct BatchCost {
    int64_t bytes = 0;
    double planning_seconds = 0;
  };
  static BatchCost CostOf(const v1::GlobalBatch& batch);
  /// One plan being made on its detached thread (plan_cache.cc).
  struct PlanningTask;
  /// What FinishPlanning leaves to do without the lock.
  struct Evictions {
    std::vector<int64_t> evicted;
    std::vector<int64_t> left_window;
  };

  void Log(const std::string& line) const {
    if (log_) log_(line);
  }
  absl::Status CheckFingerprintLocked(int64_t step, uint64_t fingerprint) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// `step`'s entry, made (with its version from the history, if it left
  /// the window before a restart) if there is none.
  StepEntry& EntryFor(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// RESOURCE_EXHAUSTED if the pending batches and `added` (`count` more)
  /// would exceed a budget.
  absl::Status CheckBudgetLocked(int count, BatchCost added) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Keeps `batch` in `entry` until `step` is planned, counting its cost.
  void HoldBatchLocked(int64_t step, StepEntry& entry,
                       std::shared_ptr<const v1::GlobalBatch> batch,
                       BatchCost cost) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseBatchLocked(int64_t step, StepEntry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Drops `step`'s cached plan (if any) and its bytes.
  void UncacheLocked(int64_t step, StepEntry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Forgets a failed `step` for a new batch with `fingerprint`.
  void ReplaceFailedLocked(int64_t step, StepEntry& entry,
                           uint64_t fingerprint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// FAILED_PRECONDITION: `step`'s plan and batch are gone.
  absl::Status NotInMemory(int64_t step) const;
  /// Records (if `record`) and plans one step; reports metrics and logs.
  std::shared_ptr<const PlannedStep> ComputePlan(
      std::shared_ptr<const v1::GlobalBatch> batch, uint64_t fingerprint,
      int64_t params_version, bool record) ABSL_LOCKS_EXCLUDED(mu_);
  /// Runs the planner on a detached thread and waits for it, or until
  /// Shutdown abandons it (then an UNAVAILABLE PlannedStep to retry).
  std::shared_ptr<const PlannedStep> RunAbandonably(
      std::shared_ptr<const v1::GlobalBatch> batch,
      std::shared_ptr<const ParamsVersion> params) ABSL_LOCKS_EXCLUDED(mu_);
  Evictions FinishPlanning(int64_t step, const PlannedStep& result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Folds `left_window` into the history on disk and deletes their records.
  void Compact(const std::vector<int64_t>& left_window)
      ABSL_LOCKS_EXCLUDED(mu_);
  void BackgroundLoop() ABSL_LOCKS_EXCLUDED(mu_);

  /// The clock the planning threads read: the cache's until the cache is
  /// destroyed, then the system's, so that an abandoned thread never reads
  /// a clock that may be gone. Thread-safe.
  class PlanningClock;

  const PlanCacheOptions options_;
  const CostParamsRegistry& registry_;
  /// Shared with every planning thread.
  const std::shared_ptr<PlanningClock> planning_clock_;
  PlannerStateStore* const store_;
  PlannerMetrics& metrics_;
  const std::function<void(const std::string&)> log_;
  const std::function<void(const std::vector<int64_t>&)> on_evicted_;

  mutable absl::Mutex mu_;
  /// Serializes compactions (each writes the whole history, then deletes).
  absl::Mutex compact_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  /// Steps ever planned or submitted (since the planner started).
  std::map<int64_t, StepEntry> steps_ ABSL_GUARDED_BY(mu_);
  /// Steps whose finished plan is cached (evicted smallest first).
  std::set<int64_t> cached_steps_ ABSL_GUARDED_BY(mu_);
  /// The sum of their StepEntry::plan_bytes.
  int64_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  /// Steps whose StepEntry holds a batch that is not planned yet.
  std::set<int64_t> pending_steps_ ABSL_GUARDED_BY(mu_);
  /// The sums of their StepEntry::batch_bytes and batch_planning_seconds.
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  double pending_planning_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  /// Steps with a record on disk (at most plan_cache_steps but for the
  /// step being recorded); older ones are in `history_`.
  std::set<int64_t> recorded_steps_ ABSL_GUARDED_BY(mu_);
  StepHistory history_ ABSL_GUARDED_BY(mu_);

  /// Plans running on their detached threads, for Shutdown to abandon.
  std::set<std::shared_ptr<PlanningTask>> in_flight_ ABSL_GUARDED_BY(mu_);
  std::deque<int64_t> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar queue_cv_;
  absl::Mutex threads_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(threads_mu_);
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PLAN_CACHE_H_
