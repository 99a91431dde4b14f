#ifndef DCP_PLANNER_SERVICE_PLANNER_METRICS_H_
#define DCP_PLANNER_SERVICE_PLANNER_METRICS_H_

#include <cstdint>
#include <map>

namespace dcp {

/// What the planner service reports about the job, independent of how it is
/// exported (Prometheus in the server; a recorder in tests). Implementations
/// must be thread-safe: handler methods call it concurrently.
class PlannerMetrics {
 public:
  virtual ~PlannerMetrics() = default;

  /// A step's plan was computed (once per step, not per request).
  virtual void PlanComputed(double latency_seconds,
                            double predicted_step_seconds) = 0;
  /// The shape of the step's plan, reported right after PlanComputed:
  /// `groups_by_sp_size` maps each SP size the plan uses to its number of
  /// groups; `micro_batches` is the plan's total micro-batch count over all
  /// groups; `mean_checkpointed_layers` is the mean over those micro-batches
  /// of their checkpointed (recomputed) layers, and
  /// `max_checkpointed_layers` the largest.
  virtual void PlanShape(const std::map<int, int>& groups_by_sp_size,
                         int micro_batches, double mean_checkpointed_layers,
                         int max_checkpointed_layers) = 0;
  /// A rank reported its measured step time.
  virtual void StepMeasured(int rank, double measured_step_seconds) = 0;
  /// (max - mean) / max of the ranks' measured step times of a step, once
  /// every rank of the step has reported.
  virtual void StepImbalance(double imbalance) = 0;
  /// |measured - predicted| / measured of a group's step time.
  virtual void CostModelError(double relative_error) = 0;
  virtual void RegisteredWorkers(int workers) = 0;

  // Typed events for tools and tests (the load test learns plan times from
  // them, not from log lines). No-ops unless overridden.

  /// Step `step`'s plan was computed (right after PlanComputed) in
  /// `planning_seconds`; `plannable` is false when the batch could not be
  /// planned.
  virtual void StepPlanned(int64_t step, double planning_seconds,
                           bool plannable) {
    (void)step;
    (void)planning_seconds;
    (void)plannable;
  }
  /// A cost-model fit over `workers` workers' `samples` profile samples
  /// finished.
  virtual void ProfilesFitted(int workers, int64_t samples) {
    (void)workers;
    (void)samples;
  }
};

/// Drops everything; a base for recorders that keep only some events.
class NoopPlannerMetrics : public PlannerMetrics {
 public:
  void PlanComputed(double, double) override {}
  void PlanShape(const std::map<int, int>&, int, double, int) override {}
  void StepMeasured(int, double) override {}
  void StepImbalance(double) override {}
  void CostModelError(double) override {}
  void RegisteredWorkers(int) override {}
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PLANNER_METRICS_H_
