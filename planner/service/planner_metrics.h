#ifndef DCP_PLANNER_SERVICE_PLANNER_METRICS_H_
#define DCP_PLANNER_SERVICE_PLANNER_METRICS_H_

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
  /// A rank reported its measured step time.
  virtual void StepMeasured(int rank, double measured_step_seconds) = 0;
  /// (max - mean) / max of the ranks' measured step times of a step, once
  /// every rank of the step has reported.
  virtual void StepImbalance(double imbalance) = 0;
  /// |measured - predicted| / measured of a group's step time.
  virtual void CostModelError(double relative_error) = 0;
  virtual void RegisteredWorkers(int workers) = 0;
};

/// Drops everything.
class NoopPlannerMetrics final : public PlannerMetrics {
 public:
  void PlanComputed(double, double) override {}
  void StepMeasured(int, double) override {}
  void StepImbalance(double) override {}
  void CostModelError(double) override {}
  void RegisteredWorkers(int) override {}
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PLANNER_METRICS_H_
