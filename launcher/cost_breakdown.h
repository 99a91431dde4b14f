// Where the cost model's step-time error comes from: per micro-batch of every
// group, the predicted compute (forward, recompute, backward) and all-to-all
// time against what the group's ranks measured, and per group the predicted
// idle time (the step less the group's busy time) against the measured one
// (the rank's step less its micro-batches' compute and communication: waiting,
// the gradient all-reduce, the optimizer). Summarised as the median and p90
// (common/percentile.h) of the relative error of each term.

#ifndef DCP_LAUNCHER_COST_BREAKDOWN_H_
#define DCP_LAUNCHER_COST_BREAKDOWN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/measured_timeline.h"

namespace dcp {

/// One term's errors. Plain value.
struct TermError {
  /// Samples compared (micro-batches, or groups for idle).
  int samples = 0;
  /// Median and p90 of |predicted - measured| / base.
  double median = 0;
  double p90 = 0;
  /// Median of predicted / measured (> 1: the model overestimates).
  double median_ratio = 0;
};

/// A run's breakdown. Plain value.
struct CostBreakdown {
  int steps = 0;
  /// Per micro-batch of a group, base: the measured term. Micro-batches
  /// whose measured term is 0 are left out (e.g. all-to-all at SP 1).
  TermError compute;
  TermError communication;
  /// Per group and step, base: the group's measured step seconds (idle is
  /// near 0 on the slowest group, so relative to itself it means little).
  TermError idle;
};

/// The breakdown over `steps`. Errors as MeasuredTimeline's.
absl::StatusOr<CostBreakdown> BreakdownOf(
    const std::vector<MeasuredStep>& steps);

/// "<label> cost-model breakdown over N steps: ..." and one line per term,
/// the errors in percent.
std::vector<std::string> FormatBreakdown(const std::string& label,
                                         const CostBreakdown& breakdown);

}  // namespace dcp

#endif  // DCP_LAUNCHER_COST_BREAKDOWN_H_
