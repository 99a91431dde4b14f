// PlanCache and StepHistory. Over 600 lines: the steps, the queue of
// submitted batches with its budget, and the abandonable planning threads
// share one mutex and one StepEntry, so they stay in one class.

#include "planner/service/plan_cache.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/malloc_control.h"
#include "common/status_macros.h"
#include "planner/service/planner_state_store.h"

namespace dcp {
namespace {

/// Batches from this many samples on return the memory their planning
/// freed to the kernel (common/malloc_control.h).
constexpr int64_t kReleaseAfterSamples = int64_t{1} << 16;

}  // namespace

// ---------------------------------------------------------------------------
// StepHistory.

StepHistory::StepHistory(const v1::CompactedStepsRecord& record) {
  // Ranges as written are disjoint.
  for (const v1::StepVersionRange& range : record.ranges()) {
    ranges_[range.first_step()] =
        Range{range.last_step(), range.params_version()};
  }
}

void StepHistory::Add(int64_t step, int64_t params_version) {
  if (VersionOf(step).has_value()) return;
  auto next = ranges_.upper_bound(step);
  const bool joins_next = next != ranges_.end() && next->first == step + 1 &&
                          next->second.params_version == params_version;
  if (next != ranges_.begin()) {
    auto previous = std::prev(next);
    if (previous->second.last_step == step - 1 &&
        previous->second.params_version == params_version) {
      previous->second.last_step = joins_next ? next->second.last_step : step;
      if (joins_next) ranges_.erase(next);
      return;
    }
  }
  if (joins_next) {
    const Range range = next->second;
    ranges_.erase(next);
    ranges_[step] = range;
    return;
  }
  ranges_[step] = Range{step, params_version};
}

std::optional<int64_t> StepHistory::VersionOf(int64_t step) const {
  auto next = ranges_.upper_bound(step);
  if (next == ranges_.begin()) return std::nullopt;
  const auto& [first, range] = *std::prev(next);
  if (step > range.last_step) return std::nullopt;
  return range.params_version;
}

v1::CompactedStepsRecord StepHistory::ToRecord() const {
  v1::CompactedStepsRecord record;
  for (const auto& [first, range] : ranges_) {
    v1::StepVersionRange* added = record.add_ranges();
    added->set_first_step(first);
    added->set_last_step(range.last_step);
    added->set_params_version(range.params_version);
  }
  return record;
}

// ---------------------------------------------------------------------------
// PlanCache.

/// Shared by a waiting request and the detached thread that plans for it.
struct PlanCache::PlanningTask {
  absl::Mutex mu;
  /// Set by the planning thread when it is done.
  std::shared_ptr<const PlannedStep> result ABSL_GUARDED_BY(mu);
  /// Set by Shutdown: the waiter stops waiting.
  bool abandoned ABSL_GUARDED_BY(mu) = false;

  bool DoneOrAbandoned() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return result != nullptr || abandoned;
  }
};

class PlanCache::PlanningClock final : public Clock {
 public:
  explicit PlanningClock(const Clock& clock) : clock_(&clock) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return clock_ != nullptr ? clock_->Now() : RealClock::Get().Now();
  }

  absl::Time MonotonicNow() const override {
    absl::MutexLock lock(&mu_);
    return clock_ != nullptr ? clock_->MonotonicNow()
                             : RealClock::Get().MonotonicNow();
  }

  /// From now on, the system's clock.
  void Retire() {
    absl::MutexLock lock(&mu_);
    clock_ = nullptr;
  }

 private:
  mutable absl::Mutex mu_;
  const Clock* clock_ ABSL_GUARDED_BY(mu_);
};

PlanCache::PlanCache(
    PlanCacheOptions options, const CostParamsRegistry& registry,
    const Clock& clock, PlannerStateStore* store, PlannerMetrics& metrics,
    std::function<void(const std::string&)> log,
    std::function<void(const std::vector<int64_t>&)> on_evicted)
    : options_(std::move(options)),
      registry_(registry),
      planning_clock_(std::make_shared<PlanningClock>(clock)),
      store_(store),
      metrics_(metrics),
      log_(std::move(log)),
      on_evicted_(std::move(on_evicted)) {}

PlanCache::~PlanCache() {
  Shutdown();
  planning_clock_->Retire();  // abandoned threads may still be planning
}

absl::Status PlanCache::Load(const std::vector<v1::StepRecord>& steps,
                             const v1::CompactedStepsRecord& compacted) {
  std::vector<int64_t> left_window;
  {
    absl::MutexLock lock(&mu_);
    history_ = StepHistory(compacted);
    for (const v1::StepRecord& record : steps) {
      if (registry_.Version(record.params_version()) == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "state record of step ", record.step(),
            " refers to parameter version ", record.params_version(),
            ", which is missing; restore the state directory or start with "
            "an empty one"));
      }
      StepEntry& entry = steps_[record.step()];
      entry.fingerprint = record.fingerprint();
      entry.params_version = record.params_version();
      entry.persisted = true;
      recorded_steps_.insert(record.step());
    }
    while (static_cast<int>(recorded_steps_.size()) >
           options_.plan_cache_steps) {
      const int64_t oldest = *recorded_steps_.begin();
      history_.Add(oldest, steps_[oldest].params_version);
      recorded_steps_.erase(recorded_steps_.begin());
      left_window.push_back(oldest);
    }
  }
  Compact(left_window);
  return absl::OkStatus();
}

void PlanCache::Start() {
  absl::MutexLock threads_lock(&threads_mu_);
  for (int i = 0; i < options_.background_planning_threads; ++i) {
    threads_.emplace_back([this] { BackgroundLoop(); });
  }
}

void PlanCache::Shutdown() {
  absl::MutexLock threads_lock(&threads_mu_);
  std::set<std::shared_ptr<PlanningTask>> in_flight;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
    queue_cv_.SignalAll();
    in_flight = in_flight_;
  }
  for (const std::shared_ptr<PlanningTask>& task : in_flight) {
    absl::MutexLock task_lock(&task->mu);
    task->abandoned = true;
  }
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
}

void PlanCache::BackgroundLoop() {
  while (true) {
    std::shared_ptr<const v1::GlobalBatch> batch;
    uint64_t fingerprint = 0;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) queue_cv_.Wait(&mu_);
      if (stopping_) return;
      const int64_t step = queue_.front();
      queue_.pop_front();
      auto it = steps_.find(step);
      if (it == steps_.end() || it->second.plan.valid() ||
          it->second.batch == nullptr) {
        continue;  // already planned or planning
      }
      batch = it->second.batch;
      fingerprint = it->second.fingerprint;
    }
    // Errors reach whoever asks for the step's plan.
    (void)Plan(std::move(batch), fingerprint);
  }
}

PlanCache::StepEntry& PlanCache::EntryFor(int64_t step) {
  auto [it, added] = steps_.try_emplace(step);
  if (added) {
    // A step that left the window before a restart keeps its version.
    if (std::optional<int64_t> version = history_.VersionOf(step)) {
      it->second.persisted = true;
      it->second.params_version = *version;
    }
  }
  return it->second;
}

absl::Status PlanCache::NotInMemory(int64_t step) const {
  return absl::FailedPreconditionError(absl::StrCat(
      "step ", step, "'s plan is no longer in memory (older than the last ",
      options_.plan_cache_steps,
      " planned steps, or planned before the planner restarted) and its "
      "batch is not kept; ask again with the batch's samples"));
}

absl::Status PlanCache::CheckFingerprintLocked(int64_t step,
                                               uint64_t fingerprint) const {
  auto it = steps_.find(step);
  if (it != steps_.end() && it->second.fingerprint != fingerprint &&
      !it->second.failed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step,
        " was submitted or planned with a different batch (fingerprint ",
        Hex(it->second.fingerprint), " != ", Hex(fingerprint),
        "); a step's batch must not change"));
  }
  return absl::OkStatus();
}

absl::Status PlanCache::CheckFingerprint(int64_t step,
                                         uint64_t fingerprint) const {
  absl::MutexLock lock(&mu_);
  return CheckFingerprintLocked(step, fingerprint);
}

std::optional<StepPlanFuture> PlanCache::Find(int64_t step,
                                              uint64_t fingerprint) const {
  absl::MutexLock lock(&mu_);
  auto it = steps_.find(step);
  if (it == steps_.end() || it->second.fingerprint != fingerprint ||
      !it->second.plan.valid()) {
    return std::nullopt;
  }
  return it->second.plan;
}

absl::StatusOr<std::shared_ptr<const PlannedStep>> PlanCache::Await(
    const StepPlanFuture& future) {
  const std::shared_ptr<const PlannedStep>& result = future.get();
  if (!result->status.ok()) return result->status;
  return result;
}

absl::StatusOr<std::shared_ptr<const PlannedStep>> PlanCache::Plan(
    std::shared_ptr<const v1::GlobalBatch> batch, uint64_t fingerprint) {
  const int64_t step = batch->step();
  // Read before taking `mu_`: the version current when planning starts.
  const int64_t current_version = registry_.Snapshot()->current->version;
  const BatchCost cost = CostOf(*batch);
  std::promise<std::shared_ptr<const PlannedStep>> promise;
  StepPlanFuture future;
  bool plan_here = false;
  bool record = false;
  int64_t params_version = 0;
  {
    absl::MutexLock lock(&mu_);
    DCP_RETURN_IF_ERROR(CheckFingerprintLocked(step, fingerprint));
    auto existing = steps_.find(step);
    const bool holds_batch =
        existing != steps_.end() && existing->second.batch != nullptr;
    const bool planning =
        existing != steps_.end() && existing->second.plan.valid() &&
        !(existing->second.failed &&
          existing->second.fingerprint != fingerprint);
    if (!planning && !holds_batch) {
      DCP_RETURN_IF_ERROR(CheckBudgetLocked(1, cost));
    }
    StepEntry& entry = EntryFor(step);
    if (entry.failed && entry.fingerprint != fingerprint) {
      ReplaceFailedLocked(step, entry, fingerprint);
    }
    entry.fingerprint = fingerprint;
    if (!entry.plan.valid()) {
      // Kept until the plan is cached, so that a request by step can plan
      // again after a failure to record the step.
      if (entry.batch == nullptr) HoldBatchLocked(step, entry, batch, cost);
      if (!entry.persisted) entry.params_version = current_version;
      future = promise.get_future().share();
      entry.plan = future;
      plan_here = true;
      record = !entry.persisted;
      params_version = entry.params_version;
    } else {
      future = entry.plan;
    }
  }
  if (plan_here) {
    std::shared_ptr<const PlannedStep> result =
        ComputePlan(batch, fingerprint, params_version, record);
    Evictions evictions;
    bool delete_record = false;
    {
      absl::MutexLock lock(&mu_);
      evictions = FinishPlanning(step, *result);
      if (!result->retry && !result->status.ok()) {
        delete_record = recorded_steps_.erase(step) > 0 || record;
      } else if (record && !result->retry) {
        recorded_steps_.insert(step);
      }
      while (static_cast<int>(recorded_steps_.size()) >
             options_.plan_cache_steps) {
        auto oldest = recorded_steps_.begin();
        if (*oldest == step) ++oldest;
        if (oldest == recorded_steps_.end()) break;
        history_.Add(*oldest, steps_[*oldest].params_version);
        evictions.left_window.push_back(*oldest);
        recorded_steps_.erase(oldest);
      }
    }
    if (delete_record && store_ != nullptr) {
      // Recorded before planning; a failed batch must not claim its step
      // across a restart either. (A failure leaves a record whose batch a
      // restarted planner refuses to plan again, as before.)
      if (absl::Status status = store_->DeleteStep(step); !status.ok()) {
        Log(absl::StrCat("step ", step, "'s failed batch still has a record: ",
                         status.message()));
      }
    }
    promise.set_value(result);
    const std::shared_ptr<const ParamsVersion> version =
        registry_.Version(result->params_version);
    if (store_ != nullptr && result->status.ok() && !result->retry &&
        version != nullptr) {
      // For tools only (step_state_files.h), after the waiters have their
      // plan, and written off this thread where a writer is given: a
      // failure is logged, not the step's.
      v1::StepPlanRecord plan_record =
          MakeStepPlanRecord(*batch, *result, *version);
      if (options_.record_plan) {
        options_.record_plan(std::move(plan_record));
      } else if (absl::Status status = store_->WriteStepPlan(plan_record);
                 !status.ok()) {
        Log(absl::StrCat("step ", step, "'s plan was not recorded: ",
                         status.message()));
      }
    }
    if (!evictions.evicted.empty() && on_evicted_) {
      on_evicted_(evictions.evicted);
    }
    Compact(evictions.left_window);
  }
  return Await(future);
}

std::shared_ptr<const PlannedStep> PlanCache::ComputePlan(
    std::shared_ptr<const v1::GlobalBatch> batch, uint64_t fingerprint,
    int64_t params_version, bool record) {
  const int64_t step = batch->step();
  const int64_t batch_samples = batch->samples_size();
  if (record && store_ != nullptr) {
    v1::StepRecord step_record;
    step_record.set_step(step);
    step_record.set_fingerprint(fingerprint);
    step_record.set_params_version(params_version);
    step_record.set_num_samples(batch_samples);
    if (absl::Status status = store_->WriteStep(step_record); !status.ok()) {
      auto result = std::make_shared<PlannedStep>();
      result->params_version = params_version;
      result->status = PersistError(absl::StrCat("step ", step), status);
      result->retry = true;
      return result;
    }
  }
  std::shared_ptr<const PlannedStep> result =
      RunAbandonably(std::move(batch), registry_.Version(params_version));
  if (result == nullptr) {
    auto abandoned = std::make_shared<PlannedStep>();
    abandoned->params_version = params_version;
    abandoned->status = absl::UnavailableError(absl::StrCat(
        "the planner is shutting down and abandoned planning step ", step,
        "; ask the planner that replaces it"));
    abandoned->retry = true;
    Log(absl::StrCat("step ", step, ": planning abandoned at shutdown"));
    return abandoned;
  }
  if (result->status.ok()) {
    metrics_.PlanComputed(result->planning_seconds,
                          result->predicted_step_seconds);
    metrics_.PlanShape(result->shape.groups_by_sp_size,
                       result->shape.micro_batches,
                       result->shape.mean_checkpointed_layers,
                       result->shape.max_checkpointed_layers);
  }
  metrics_.StepPlanned(step, result->planning_seconds, result->status.ok());
  Log(DescribeStepPlan(step, *result));
  // Planning a large batch frees as much as it keeps; give it back to the
  // kernel so that the planner's resident memory follows what it holds.
  // Not after small batches, whose plans must stay fast: from
  // kReleaseAfterSamples on, planning takes tenths of a second and the
  // release a few milliseconds.
  if (batch_samples >= kReleaseAfterSamples) ReleaseFreedMemory();
  return result;
}

std::shared_ptr<const PlannedStep> PlanCache::RunAbandonably(
    std::shared_ptr<const v1::GlobalBatch> batch,
    std::shared_ptr<const ParamsVersion> params) {
  auto task = std::make_shared<PlanningTask>();
  {
    absl::MutexLock lock(&mu_);
    in_flight_.insert(task);
  }
  // Everything the thread uses is its own (copies and shared pointers), so
  // that it may outlive the cache once abandoned.
  std::thread([task, batch = std::move(batch), params = std::move(params),
               make_step_plan = options_.make_step_plan,
               planner_options = options_.planner_options,
               world_size = options_.world_size, clock = planning_clock_] {
    std::shared_ptr<const PlannedStep> result =
        make_step_plan(*batch, *params, planner_options, world_size, *clock);
    absl::MutexLock task_lock(&task->mu);
    task->result = std::move(result);
  }).detach();
  std::shared_ptr<const PlannedStep> result;
  {
    absl::MutexLock task_lock(&task->mu);
    task->mu.Await(absl::Condition(task.get(), &PlanningTask::DoneOrAbandoned));
    // Once abandoned, a result that arrives before this thread wakes is
    // dropped too: Shutdown answers every waiter the same way.
    if (!task->abandoned) result = task->result;
  }
  absl::MutexLock lock(&mu_);
  in_flight_.erase(task);
  return result;
}

PlanCache::Evictions PlanCache::FinishPlanning(int64_t step,
                                               const PlannedStep& result) {
  Evictions evictions;
  auto it = steps_.find(step);
  if (it == steps_.end()) return evictions;
  StepEntry& entry = it->second;
  if (result.retry) {
    entry.plan = StepPlanFuture();  // the next request tries again
    return evictions;
  }
  entry.failed = !result.status.ok();
  entry.persisted = !entry.failed;
  ReleaseBatchLocked(step, entry);
  if (cached_steps_.insert(step).second) {
    entry.plan_bytes = PlannedStepBytes(result);
    cached_bytes_ += entry.plan_bytes;
  }
  // Evicts the oldest other steps beyond the cache's size or bytes.
  const auto over = [this] {
    return static_cast<int>(cached_steps_.size()) > options_.plan_cache_steps ||
           (options_.cached_bytes_budget > 0 &&
            cached_bytes_ > options_.cached_bytes_budget);
  };
  while (over()) {
    auto oldest = cached_steps_.begin();
    if (*oldest == step) ++oldest;
    if (oldest == cached_steps_.end()) break;
    const int64_t evicted = *oldest;
    UncacheLocked(evicted, steps_[evicted]);
    evictions.evicted.push_back(evicted);
  }
  return evictions;
}

void PlanCache::Compact(const std::vector<int64_t>& left_window) {
  if (store_ == nullptr || left_window.empty()) return;
  absl::MutexLock compact_lock(&compact_mu_);
  v1::CompactedStepsRecord record;
  {
    absl::MutexLock lock(&mu_);
    record = history_.ToRecord();
  }
  // A failure leaves extra step records, which the next compaction or
  // restart folds in; plans are unaffected.
  if (absl::Status status = store_->CompactSteps(record, left_window);
      !status.ok()) {
    Log(absl::StrCat("step records not compacted: ", status.message()));
  }
}

absl::StatusOr<std::shared_ptr<const PlannedStep>> PlanCache::PlanByStep(
    int64_t step, uint64_t fingerprint) {
  std::shared_ptr<const v1::GlobalBatch> batch;
  uint64_t recorded_fingerprint = 0;
  {
    absl::ReleasableMutexLock lock(&mu_);
    auto it = steps_.find(step);
    if (it == steps_.end()) {
      if (history_.VersionOf(step).has_value()) return NotInMemory(step);
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step,
          " is unknown: submit its batch (SubmitBatches or GetPlan with "
          "samples) first"));
    }
    const StepEntry& entry = it->second;
    if (fingerprint != 0 && fingerprint != entry.fingerprint) {
      return absl::FailedPreconditionError(absl::StrCat(
          "batch_fingerprint = ", Hex(fingerprint), " but step ", step,
          " was recorded with batch fingerprint ", Hex(entry.fingerprint),
          "; this worker's batch differs from the one the planner has for "
          "the step (every rank must build the same batches: same dataset, "
          "seed and batch size)"));
    }
    if (entry.plan.valid()) {
      StepPlanFuture future = entry.plan;
      lock.Release();
      return Await(future);
    }
    if (entry.batch == nullptr) return NotInMemory(step);
    batch = entry.batch;
    recorded_fingerprint = entry.fingerprint;
  }
  // Submitted ahead but not yet taken by a background thread (or none).
  return Plan(std::move(batch), recorded_fingerprint);
}

absl::Status PlanCache::Submit(const v1::SubmitBatchesRequest& request,
                               const SubmittedBatches& batches) {
  // Copied and measured before taking the lock (a 2^20-sequence batch
  // takes tens of milliseconds to copy), also for steps that turn out to
  // be known already.
  std::map<int64_t, std::pair<std::shared_ptr<const v1::GlobalBatch>,
                              BatchCost>>
      copies;
  for (const auto& [step, i] : batches.index_of_step) {
    auto copy = std::make_shared<const v1::GlobalBatch>(request.batches(i));
    const BatchCost cost = CostOf(*copy);
    copies.emplace(step, std::make_pair(std::move(copy), cost));
  }
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < request.batches_size(); ++i) {
    DCP_RETURN_IF_ERROR(CheckFingerprintLocked(request.batches(i).step(),
                                               batches.fingerprints[i]));
  }
  int new_pending = 0;
  BatchCost added;
  for (const auto& [step, copy] : copies) {
    auto it = steps_.find(step);
    const uint64_t fingerprint =
        batches.fingerprints[batches.index_of_step.at(step)];
    if (it == steps_.end() ||
        (!it->second.plan.valid() && it->second.batch == nullptr) ||
        (it->second.failed && it->second.fingerprint != fingerprint)) {
      ++new_pending;
      added.bytes += copy.second.bytes;
      added.planning_seconds += copy.second.planning_seconds;
    }
  }
  DCP_RETURN_IF_ERROR(CheckBudgetLocked(new_pending, added));
  const bool background =
      !stopping_ && options_.background_planning_threads > 0;
  for (auto& [step, copy] : copies) {
    StepEntry& entry = EntryFor(step);
    const uint64_t fingerprint =
        batches.fingerprints[batches.index_of_step.at(step)];
    if (entry.failed && entry.fingerprint != fingerprint) {
      ReplaceFailedLocked(step, entry, fingerprint);
    }
    entry.fingerprint = fingerprint;
    if (entry.plan.valid() || entry.batch != nullptr) continue;
    HoldBatchLocked(step, entry, std::move(copy.first), copy.second);
    if (background) queue_.push_back(step);
  }
  if (background) queue_cv_.SignalAll();
  return absl::OkStatus();
}

void PlanCache::ReplaceFailedLocked(int64_t step, StepEntry& entry,
                                    uint64_t fingerprint) {
  entry.failed = false;
  entry.fingerprint = fingerprint;
  UncacheLocked(step, entry);
}

void PlanCache::UncacheLocked(int64_t step, StepEntry& entry) {
  entry.plan = StepPlanFuture();
  if (cached_steps_.erase(step) > 0) cached_bytes_ -= entry.plan_bytes;
  entry.plan_bytes = 0;
}

PlanCache::BatchCost PlanCache::CostOf(const v1::GlobalBatch& batch) {
  return BatchCost{static_cast<int64_t>(batch.SpaceUsedLong()),
                   PredictedPlanningSeconds(batch.samples_size())};
}

void PlanCache::HoldBatchLocked(int64_t step, StepEntry& entry,
                                std::shared_ptr<const v1::GlobalBatch> batch,
                                BatchCost cost) {
  entry.batch = std::move(batch);
  if (!pending_steps_.insert(step).second) return;
  entry.batch_bytes = cost.bytes;
  entry.batch_planning_seconds = cost.planning_seconds;
  pending_bytes_ += cost.bytes;
  pending_planning_seconds_ += cost.planning_seconds;
}

void PlanCache::ReleaseBatchLocked(int64_t step, StepEntry& entry) {
  entry.batch = nullptr;
  if (pending_steps_.erase(step) == 0) return;
  pending_bytes_ -= entry.batch_bytes;
  pending_planning_seconds_ -= entry.batch_planning_seconds;
  entry.batch_bytes = 0;
  entry.batch_planning_seconds = 0;
  if (pending_steps_.empty()) {
    // No rounding drift once nothing waits.
    pending_bytes_ = 0;
    pending_planning_seconds_ = 0;
  }
}

absl::Status PlanCache::CheckBudgetLocked(int count, BatchCost added) const {
  if (count == 0) return absl::OkStatus();
  if (pending_steps_.size() + count > kMaxPendingBatches) {
    return absl::ResourceExhaustedError(absl::StrCat(
        pending_steps_.size(),
        " submitted batches are waiting to be planned "
        "and this request adds ",
        count, "; at most ", kMaxPendingBatches,
        " may wait: submit a step's batch shortly before it runs (e.g. one "
        "step ahead), or fetch the waiting steps' plans first"));
  }
  const auto mib = [](int64_t bytes) {
    return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  };
  if (options_.pending_bytes_budget > 0 &&
      pending_bytes_ + added.bytes > options_.pending_bytes_budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the batches waiting to be planned would hold ",
        mib(pending_bytes_ + added.bytes), " (", pending_steps_.size(),
        " waiting hold ", mib(pending_bytes_), "; this request adds ", count,
        " of ", mib(added.bytes), "), beyond their memory budget of ",
        mib(options_.pending_bytes_budget), " (",
        options_.pending_bytes_budget_source,
        "): submit fewer or smaller batches ahead, fetch the waiting steps' "
        "plans first, or give the planner more memory"));
  }
  if (options_.pending_planning_seconds_budget > 0 &&
      pending_planning_seconds_ + added.planning_seconds >
          options_.pending_planning_seconds_budget) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the batches waiting to be planned would take about %.0f s of "
        "planning (%d waiting: %.0f s; this request adds %d: %.0f s), beyond "
        "the budget of %.0f s (dcp_planner --max-queued-planning): submit "
        "fewer or smaller batches ahead, or fetch the waiting steps' plans "
        "first",
        pending_planning_seconds_ + added.planning_seconds,
        pending_steps_.size(), pending_planning_seconds_, count,
        added.planning_seconds, options_.pending_planning_seconds_budget));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const PlannedStep>> PlanCache::ReadyPlan(
    int64_t step) const {
  absl::MutexLock lock(&mu_);
  auto entry = steps_.find(step);
  if (entry == steps_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step, " has not been planned; fetch its plan first"));
  }
  const StepPlanFuture& future = entry->second.plan;
  if (!future.valid() ||
      future.wait_for(std::chrono::seconds(0)) != std::future_status::ready ||
      !future.get()->status.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step,
        " has no plan in memory (not planned since the planner started, "
        "still planning, failed, or older than the last ",
        options_.plan_cache_steps,
        " steps); report steps right after running them"));
  }
  return future.get();
}

}  // namespace dcp
