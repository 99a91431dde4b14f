#include "worker/prometheus_worker_metrics.h"

#include <map>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"

namespace dcp {
namespace {

prometheus::Family<prometheus::Gauge>& AddGauge(prometheus::Registry& registry,
                                                const char* name,
                                                const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

}  // namespace

PrometheusWorkerMetrics::PrometheusWorkerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      step_seconds_(AddGauge(*registry_, worker_metric_names::kStepSeconds,
                             "Wall time of the last training step")),
      compute_seconds_(
          AddGauge(*registry_, worker_metric_names::kComputeSeconds,
                   "Compute time of the last step's micro-batches")),
      communication_seconds_(
          AddGauge(*registry_, worker_metric_names::kCommunicationSeconds,
                   "Ulysses all-to-all time of the last step's micro-batches")),
      idle_seconds_(AddGauge(
          *registry_, worker_metric_names::kIdleSeconds,
          "Rest of the last step: waiting for slower groups, the gradient "
          "all-reduce and the optimizer step")),
      peak_memory_bytes_(
          AddGauge(*registry_, worker_metric_names::kPeakMemoryBytes,
                   "Peak device memory of the last step (0 if unknown)")),
      loss_(AddGauge(*registry_, worker_metric_names::kLoss,
                     "Mean token loss of the last global batch")),
      tokens_total_(prometheus::BuildCounter()
                        .Name(worker_metric_names::kTokensTotal)
                        .Help("Real (unpadded) tokens this rank processed: "
                              "its slice of each sequence it ran")
                        .Register(*registry_)) {}

void PrometheusWorkerMetrics::StepCompleted(int rank,
                                            const WorkerStepMetrics& step) {
  const std::map<std::string, std::string> labels = {
      {worker_metric_names::kRankLabel, std::to_string(rank)}};
  step_seconds_.Add(labels).Set(step.step_seconds);
  compute_seconds_.Add(labels).Set(step.compute_seconds);
  communication_seconds_.Add(labels).Set(step.communication_seconds);
  idle_seconds_.Add(labels).Set(step.idle_seconds);
  peak_memory_bytes_.Add(labels).Set(
      static_cast<double>(step.peak_memory_bytes));
  loss_.Add(labels).Set(step.loss);
  tokens_total_.Add(labels).Increment(static_cast<double>(step.tokens));
}

}  // namespace dcp
