#ifndef DCP_PLANNER_PLAN_H_
#define DCP_PLANNER_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "cost_model/cost_model.h"

namespace dcp {

/// (seconds - bound) / bound: how far a step's `seconds` lie above a lower
/// `bound`, as a fraction of it; 0 without a bound (bound <= 0).
inline double RelativeGapToBound(double seconds, double bound) {
  return bound > 0 ? seconds / bound - 1 : 0;
}

/// One micro-batch (one gradient-accumulation micro-step) of an SP group.
struct MicroBatchPlan {
  /// Indices into the global batch's sequence list.
  std::vector<int> sequence_indices;
  /// The first k layers are checkpointed (recomputed in backward).
  int checkpointed_layers = 0;
  double predicted_seconds = 0;
  double predicted_peak_bytes = 0;
};

/// One sequence-parallel group for the whole step, and what it runs.
struct GroupPlan {
  /// Global ranks, ascending; their count is the SP size.
  std::vector<int> ranks;
  /// Run in order; their count is this group's gradient accumulation.
  std::vector<MicroBatchPlan> micro_batches;
  double predicted_seconds = 0;

  int sp_size() const { return static_cast<int>(ranks.size()); }
};

/// The plan of one global batch: a partition of the ranks into SP groups,
/// each with its micro-batches. Plain value; thread-compatible.
struct Plan {
  /// "dcp", "bucket", "packed", or an ablation name.
  std::string strategy;
  std::vector<GroupPlan> groups;
  /// Slowest group plus the exposed gradient all-reduce plus the optimizer
  /// step (CostModel::OptimizerStepSeconds, which nothing hides).
  double predicted_step_seconds = 0;
  double slowest_group_seconds = 0;
  /// Part of the step-end gradient all-reduce not hidden behind the slowest
  /// group's last backward.
  double exposed_allreduce_seconds = 0;
  /// Independent lower bound on any plan's step time (0 if not computed).
  double lower_bound_seconds = 0;

  /// (predicted - lower bound) / lower bound; 0 without a lower bound.
  double GapToLowerBound() const {
    return RelativeGapToBound(predicted_step_seconds, lower_bound_seconds);
  }
};

/// The shape on a group of `sp_size` ranks of the micro-batch of the
/// sequences at `sequence_indices` (valid indices into `lengths_tokens`),
/// in that order.
MicroBatchShape ShapeOfSequences(absl::Span<const int64_t> lengths_tokens,
                                 absl::Span<const int> sequence_indices,
                                 int sp_size);

/// Fills every prediction of `plan` (micro-batch seconds and bytes, group
/// seconds, slowest group, exposed all-reduce, step) from the cost model,
/// keeping its structure. Sequence indices must be valid for
/// `lengths_tokens` (ValidatePlan checks that). With ZeRO-3 the step's
/// groups run in lockstep (LockstepSeconds), which slowest_group_seconds
/// counts when it is longer than every group's own time.
void PredictPlan(const CostModel& cost_model,
                 absl::Span<const int64_t> lengths_tokens, Plan& plan);

/// Under ZeRO-3 every micro-batch all-gathers and reduce-scatters over
/// every rank, so all ranks run as many micro-batches as the busiest group
/// (a group with fewer first runs padding ones: the batch's shortest
/// sequence, a loss that counts nothing) and the k-th micro-batches of all
/// groups end together: the sum over k of the slowest k-th micro-batch
/// (from the micro-batches' predicted_seconds). 0 for a plan without
/// micro-batches.
double LockstepSeconds(const CostModel& cost_model,
                       absl::Span<const int64_t> lengths_tokens,
                       const Plan& plan);

/// The largest predicted peak bytes of any micro-batch in the plan.
double MaxPeakBytes(const Plan& plan);

/// The micro-batches of all the plan's groups.
int MicroBatchCount(const Plan& plan);

/// Mean over GPUs of the fraction of the step each GPU sits idle waiting for
/// the slowest group.
double MeanIdleFraction(const Plan& plan);

}  // namespace dcp

#endif  // DCP_PLANNER_PLAN_H_
