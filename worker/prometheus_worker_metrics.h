#ifndef DCP_WORKER_PROMETHEUS_WORKER_METRICS_H_
#define DCP_WORKER_PROMETHEUS_WORKER_METRICS_H_

#include <memory>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "worker/worker_metrics.h"

namespace dcp {

/// Every metric a worker exports, named in this one place (Prometheus
/// conventions: `dcp_worker_` prefix, base units, `_total` counters). All
/// are labelled by `rank`; all but kTokensTotal are gauges of the last
/// completed step.
namespace worker_metric_names {
inline constexpr char kStepSeconds[] = "dcp_worker_step_seconds";
inline constexpr char kComputeSeconds[] = "dcp_worker_compute_seconds";
inline constexpr char kCommunicationSeconds[] =
    "dcp_worker_communication_seconds";
inline constexpr char kIdleSeconds[] = "dcp_worker_idle_seconds";
inline constexpr char kPeakMemoryBytes[] = "dcp_worker_peak_memory_bytes";
inline constexpr char kLoss[] = "dcp_worker_loss";
/// Counter: real (unpadded) tokens the rank processed, summed over its
/// steps' micro-batches (WorkerStepMetrics::tokens); summed over the ranks,
/// the tokens trained on.
inline constexpr char kTokensTotal[] = "dcp_worker_tokens_total";
/// Label name.
inline constexpr char kRankLabel[] = "rank";
}  // namespace worker_metric_names

/// WorkerMetrics exported to Prometheus. Owns its registry; expose it with a
/// prometheus::Exposer. Thread-safe (prometheus-cpp families, gauges and
/// counters are).
class PrometheusWorkerMetrics final : public WorkerMetrics {
 public:
  PrometheusWorkerMetrics();

  void StepCompleted(int rank, const WorkerStepMetrics& step) override;

  /// The registry holding every metric above.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  const std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& step_seconds_;
  prometheus::Family<prometheus::Gauge>& compute_seconds_;
  prometheus::Family<prometheus::Gauge>& communication_seconds_;
  prometheus::Family<prometheus::Gauge>& idle_seconds_;
  prometheus::Family<prometheus::Gauge>& peak_memory_bytes_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Counter>& tokens_total_;
};

}  // namespace dcp

#endif  // DCP_WORKER_PROMETHEUS_WORKER_METRICS_H_
