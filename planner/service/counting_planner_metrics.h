// What the server tells the load test about planning.
// Internal to load_test_lib.

#ifndef DCP_PLANNER_SERVICE_COUNTING_PLANNER_METRICS_H_
#define DCP_PLANNER_SERVICE_COUNTING_PLANNER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "planner/service/planner_metrics.h"

namespace dcp {

/// The handler's PlannerMetrics: forwards to the server's, counts the plans
/// computed and profile fits, and records each planned step from the
/// handler's typed StepPlanned events. Thread-safe.
class CountingPlannerMetrics final : public PlannerMetrics {
 public:
  struct Planned {
    /// When the plan was computed (it is served right after).
    absl::Time at;
    double plan_ms = 0;
    int times = 0;
  };

  explicit CountingPlannerMetrics(PlannerMetrics* forward)
      : forward_(forward != nullptr ? forward : &noop_) {}

  void PlanComputed(double latency_seconds,
                    double predicted_step_seconds) override {
    plans_computed_.fetch_add(1);
    forward_->PlanComputed(latency_seconds, predicted_step_seconds);
  }
  void PlanShape(const std::map<int, int>& groups_by_sp_size, int micro_batches,
                 double mean_checkpointed_layers,
                 int max_checkpointed_layers) override {
    forward_->PlanShape(groups_by_sp_size, micro_batches,
                        mean_checkpointed_layers, max_checkpointed_layers);
  }
  void StepMeasured(int rank, double measured_step_seconds) override {
    forward_->StepMeasured(rank, measured_step_seconds);
  }
  void StepImbalance(double imbalance) override {
    forward_->StepImbalance(imbalance);
  }
  void CostModelError(double relative_error) override {
    forward_->CostModelError(relative_error);
  }
  void RegisteredWorkers(int workers) override {
    forward_->RegisteredWorkers(workers);
  }
  void StepPlanned(int64_t step, double planning_seconds,
                   bool plannable) override {
    const absl::Time now = absl::Now();
    forward_->StepPlanned(step, planning_seconds, plannable);
    absl::MutexLock lock(&mutex_);
    if (!plannable) {
      failures_.push_back(absl::StrCat(
          "step ", step, ": not plannable (the planner's log says why)"));
      return;
    }
    Planned& planned = planned_[step];
    ++planned.times;
    planned.at = now;
    planned.plan_ms = 1e3 * planning_seconds;
  }
  void ProfilesFitted(int workers, int64_t samples) override {
    profile_fits_.fetch_add(1);
    forward_->ProfilesFitted(workers, samples);
  }

  int64_t plans_computed() const { return plans_computed_.load(); }
  int64_t profile_fits() const { return profile_fits_.load(); }
  std::optional<Planned> Find(int64_t step) const {
    absl::MutexLock lock(&mutex_);
    auto it = planned_.find(step);
    if (it == planned_.end()) return std::nullopt;
    return it->second;
  }
  std::vector<std::string> failures() const {
    absl::MutexLock lock(&mutex_);
    return failures_;
  }

 private:
  NoopPlannerMetrics noop_;
  PlannerMetrics* const forward_;
  std::atomic<int64_t> plans_computed_{0};
  std::atomic<int64_t> profile_fits_{0};
  mutable absl::Mutex mutex_;
  std::map<int64_t, Planned> planned_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> failures_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_COUNTING_PLANNER_METRICS_H_
