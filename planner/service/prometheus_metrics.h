#ifndef DCP_PLANNER_SERVICE_PROMETHEUS_METRICS_H_
#define DCP_PLANNER_SERVICE_PROMETHEUS_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/status_code_enum.h"
#include "planner/service/planner_metrics.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace dcp {

/// Every metric the planner service exports, named in this one place
/// (Prometheus conventions: `dcp_` prefix, base units, `_total` counters).
namespace metric_names {
/// Histogram: seconds to compute one step's plan (once per step).
inline constexpr char kPlanLatencySeconds[] = "dcp_plan_latency_seconds";
/// Counter: steps planned (one per step, not per worker that fetched it).
inline constexpr char kPlansTotal[] = "dcp_plans_total";
/// Gauge: the predicted step time of the last planned step.
inline constexpr char kPredictedStepSeconds[] = "dcp_predicted_step_seconds";
/// Gauge, label `sp_size`: SP groups of each size in the last planned step
/// (a size used by an earlier plan but not the last one reads 0).
inline constexpr char kPlanSpGroups[] = "dcp_plan_sp_groups";
/// Gauge: micro-batches of the last planned step, summed over its groups.
inline constexpr char kPlanMicroBatches[] = "dcp_plan_micro_batches";
/// Gauge: mean checkpointed (recomputed) layers per micro-batch of the last
/// planned step.
inline constexpr char kPlanRecomputedLayers[] = "dcp_plan_recomputed_layers";
/// Gauge: the most checkpointed layers of any micro-batch of the last
/// planned step.
inline constexpr char kPlanMaxCheckpointedLayers[] =
    "dcp_plan_max_checkpointed_layers";
/// Gauge, label `rank`: the last measured step time of each rank.
inline constexpr char kMeasuredStepSeconds[] = "dcp_measured_step_seconds";
/// Gauge: (max - mean) / max of the ranks' step times of the last complete
/// step.
inline constexpr char kStepImbalanceRatio[] = "dcp_step_imbalance_ratio";
/// Gauge: |measured - predicted| / measured of the last reported group step.
inline constexpr char kCostModelRelativeError[] =
    "dcp_cost_model_relative_error";
/// Gauge: workers registered with the planner.
inline constexpr char kRegisteredWorkers[] = "dcp_registered_workers";
/// Counter, labels `method` and `code`: RPCs answered by the server.
inline constexpr char kRpcRequestsTotal[] = "dcp_rpc_requests_total";
/// Histogram, label `method`: seconds from receiving an RPC to answering it.
inline constexpr char kRpcLatencySeconds[] = "dcp_rpc_latency_seconds";

/// Label names.
inline constexpr char kRankLabel[] = "rank";
inline constexpr char kSpSizeLabel[] = "sp_size";
inline constexpr char kMethodLabel[] = "method";
inline constexpr char kCodeLabel[] = "code";
}  // namespace metric_names

/// The upper-case gRPC name of `code` ("OK", "UNAVAILABLE", ...), the value
/// of the `code` label.
absl::string_view GrpcStatusCodeName(grpc::StatusCode code);

/// PlannerMetrics exported to Prometheus, plus the RPC metrics the gRPC
/// service records. Owns its registry; expose it with a prometheus::Exposer.
/// Thread-safe: every method may be called concurrently (prometheus-cpp
/// metrics are atomic; the label caches are guarded by a mutex).
class PrometheusPlannerMetrics final : public PlannerMetrics {
 public:
  PrometheusPlannerMetrics();

  void PlanComputed(double latency_seconds,
                    double predicted_step_seconds) override;
  void PlanShape(const std::map<int, int>& groups_by_sp_size, int micro_batches,
                 double mean_checkpointed_layers,
                 int max_checkpointed_layers) override;
  void StepMeasured(int rank, double measured_step_seconds) override;
  void StepImbalance(double imbalance) override;
  void CostModelError(double relative_error) override;
  void RegisteredWorkers(int workers) override;

  /// One RPC of `method` ("GetPlan", ...) answered with `code` after
  /// `seconds`.
  void RpcCompleted(absl::string_view method, grpc::StatusCode code,
                    double seconds);

  /// The registry holding every metric above.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  const std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram& plan_latency_seconds_;
  prometheus::Counter& plans_total_;
  prometheus::Gauge& predicted_step_seconds_;
  prometheus::Family<prometheus::Gauge>& plan_sp_groups_;
  prometheus::Gauge& plan_micro_batches_;
  prometheus::Gauge& plan_recomputed_layers_;
  prometheus::Gauge& plan_max_checkpointed_layers_;
  prometheus::Family<prometheus::Gauge>& measured_step_seconds_;
  prometheus::Gauge& step_imbalance_ratio_;
  prometheus::Gauge& cost_model_relative_error_;
  prometheus::Gauge& registered_workers_;
  prometheus::Family<prometheus::Counter>& rpc_requests_total_;
  prometheus::Family<prometheus::Histogram>& rpc_latency_seconds_;

  absl::Mutex mutex_;
  /// Series already added to the families above, by label value(s); the
  /// pointees are owned by the families and live as long as the registry.
  /// The plan-shape gauges are also set under `mutex_`, so that one plan's
  /// shape is never mixed with another's.
  std::map<int, prometheus::Gauge*> plan_sp_groups_by_size_
      ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<int, prometheus::Gauge*> measured_step_seconds_by_rank_
      ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::pair<std::string, int>, prometheus::Counter*>
      rpc_requests_by_method_and_code_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, prometheus::Histogram*>
      rpc_latency_by_method_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PROMETHEUS_METRICS_H_
