#ifndef DCP_PLANNER_SERVICE_RECORDING_PLANNER_METRICS_H_
#define DCP_PLANNER_SERVICE_RECORDING_PLANNER_METRICS_H_

// A PlannerMetrics that records every event, for tests. testonly.

#include <map>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "planner/service/planner_metrics.h"

namespace dcp {

// What PlannerMetrics::PlanShape reports of one plan.
struct PlanShapeReport {
  std::map<int, int> groups_by_sp_size;
  int micro_batches = 0;
  double mean_checkpointed_layers = 0;
  int max_checkpointed_layers = 0;
};

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

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_RECORDING_PLANNER_METRICS_H_
