#ifndef DCP_WORKER_WORKER_METRICS_H_
#define DCP_WORKER_WORKER_METRICS_H_

#include <cstdint>

namespace dcp {

/// What one rank measured in one training step.
struct WorkerStepMetrics {
  /// Wall time of the step on this rank (micro-batches, gradient all-reduce,
  /// optimizer step).
  double step_seconds = 0;
  /// Sums over this rank's micro-batches.
  double compute_seconds = 0;
  double communication_seconds = 0;
  /// The rest of the step: waiting for slower groups at the gradient
  /// all-reduce, the all-reduce itself and the optimizer step.
  double idle_seconds = 0;
  /// Peak device memory of the step; 0 when unknown (CPU).
  int64_t peak_memory_bytes = 0;
  /// Mean token loss of the whole global batch.
  double loss = 0;
  /// Real (unpadded) tokens this rank processed: the sum over its
  /// micro-batches of its shard's real tokens (its slice of each sequence).
  /// Summed over every rank of the world, the global batch's tokens.
  int64_t tokens = 0;
};

/// Where a worker reports its measurements (Prometheus in the binary,
/// nothing or a recorder in tests). Implementations are thread-safe.
class WorkerMetrics {
 public:
  virtual ~WorkerMetrics() = default;
  /// Rank `rank` finished a step.
  virtual void StepCompleted(int rank, const WorkerStepMetrics& step) = 0;
};

/// Discards everything.
class NoopWorkerMetrics final : public WorkerMetrics {
 public:
  void StepCompleted(int /*rank*/, const WorkerStepMetrics& /*step*/) override {
  }
};

}  // namespace dcp

#endif  // DCP_WORKER_WORKER_METRICS_H_
