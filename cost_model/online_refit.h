// The online refit's pure parts, shared by the planner (its step reports,
// planner/service/step_stats_tracker.h) and the workers' bucket baseline
// (worker/plan_source.h): least-squares sums over measured micro-batches,
// and the cost parameters scaled by what they give.

#ifndef DCP_COST_MODEL_ONLINE_REFIT_H_
#define DCP_COST_MODEL_ONLINE_REFIT_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "cost_model/cost_model.h"
#include "cost_model/micro_batch_shape.h"
#include "cost_model/model_spec.h"

namespace dcp {

/// Online refit's sums over micro-batches of their predicted (at the fitted
/// parameters) and measured seconds: the factor is sum measured / sum
/// predicted, what a step (a sum of micro-batches) takes over its
/// prediction, long-tailed measurements (a rank waiting) included; a
/// least-squares factor of the ratios would lean to the fast ones. Pure
/// value type.
class RefitAccumulator {
 public:
  /// Micro-batch measurements needed before a factor is given.
  static constexpr int kMinObservations = 4;
  /// The range a factor may take (beyond it the measurements are not of the
  /// same kind of hardware as the model).
  static constexpr double kMinFactor = 0.1;
  static constexpr double kMaxFactor = 10;
  /// A ratio outside [1 / this, this] is a broken measurement, not a
  /// calibration signal (and could overflow the sums): not counted.
  static constexpr double kMaxRatio = 100;
  /// The relative change of the correction that makes a new version.
  static constexpr double kChangeThreshold = 0.05;

  /// True if `ratio` may be counted.
  static bool Accepts(double ratio) {
    return ratio >= 1 / kMaxRatio && ratio <= kMaxRatio;
  }
  /// One micro-batch: predicted and measured seconds (their ratio
  /// Accepts()).
  struct Observation {
    double predicted = 0;
    double measured = 0;
  };
  void Add(const std::vector<Observation>& observations);
  void Remove(const std::vector<Observation>& observations);
  /// Adds `other`'s sums: the accumulator of both's observations.
  void Merge(const RefitAccumulator& other) {
    predicted_sum_ += other.predicted_sum_;
    measured_sum_ += other.measured_sum_;
    count_ += other.count_;
  }
  int64_t count() const { return count_; }
  /// The clamped factor, or nullopt with too few observations.
  std::optional<double> Factor() const;

 private:
  double predicted_sum_ = 0;
  double measured_sum_ = 0;
  int64_t count_ = 0;
};

/// Online all-to-all refit: least squares of the micro-batches' measured
/// all-to-all seconds m against calls * latency + bus_bytes / bandwidth, as
/// running sums. Unweighted, so that it predicts the mean: a step pays the
/// sum of its exchanges, whose waits for the group's slowest rank have a
/// long tail (relative-error weights would fit the fast ones). Pure value.
class AllToAllRefitAccumulator {
 public:
  struct Fit {
    double latency_seconds = 0;
    double bus_bytes_per_second = 0;
  };
  void Add(double calls, double bus_bytes, double measured_seconds);
  void Remove(double calls, double bus_bytes, double measured_seconds);
  int64_t count() const { return count_; }
  /// The fit, or nullopt with fewer than RefitAccumulator::kMinObservations
  /// rows, rows that cannot tell latency from bandwidth, or a bandwidth
  /// that is not positive (a negative latency is held at 0).
  std::optional<Fit> Solve() const;
  /// The latency alone, with the bandwidth held at `bus_bytes_per_second`
  /// (held at 0 if negative); nullopt without rows.
  std::optional<Fit> SolveLatency(double bus_bytes_per_second) const;

 private:
  double calls_calls_ = 0, calls_bytes_ = 0, bytes_bytes_ = 0;
  // Sums of calls * m and bus_bytes * m.
  double calls_ = 0, bytes_ = 0;
  int64_t count_ = 0;
};

/// Compute time scales linearly with every compute rate's inverse and the
/// fixed per-layer, per-sequence, per-SP-layer-pass and per-micro-batch
/// times: `params` with all compute time multiplied by `factor`.
CostParams ScaleComputeTime(CostParams params, double factor);

/// `params` with every all-to-all time (latency and bytes over bandwidth)
/// multiplied by `factor`: the Ulysses all-to-alls as the workers measure
/// them, waiting for the group's slowest member included.
CostParams ScaleCommunicationTime(CostParams params, double factor);

/// `comm` with the all-to-all latency and bandwidth of groups across nodes
/// (`inter_node`) or inside one set to `fit`.
void SetAllToAll(const AllToAllRefitAccumulator::Fit& fit, bool inter_node,
                 CommParams& comm);

/// The Ulysses all-to-all calls of a micro-batch of `shape` with
/// `checkpointed_layers` recomputed, as the workers run them: two per layer
/// pass (forward, backward, recompute) at SP >= 2, none at SP 1.
double AllToAllCalls(const ModelSpec& model, const MicroBatchShape& shape,
                     int checkpointed_layers);

/// The bus bytes of those calls on one rank (what it sends to the others).
double AllToAllBusBytes(const ModelSpec& model, const MicroBatchShape& shape,
                        int checkpointed_layers);

}  // namespace dcp

#endif  // DCP_COST_MODEL_ONLINE_REFIT_H_
