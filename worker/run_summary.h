// The run summary: what one run of the workers did, step by step, as rank 0
// saw it. The agent writes it (a JSON file, after every step) and the
// launcher reads it; both go through this module, which alone knows the
// file's fields.

#ifndef DCP_WORKER_RUN_SUMMARY_H_
#define DCP_WORKER_RUN_SUMMARY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"

namespace dcp {

/// One step as rank 0 saw it. Plain value.
struct StepRecord {
  int64_t step = 0;
  /// Per SP group, in plan order: its size, its micro-batch count and the
  /// range of checkpointed layers over its micro-batches.
  std::vector<int> sp_sizes;
  std::vector<int> micro_batches;
  std::vector<std::pair<int, int>> recompute;
  /// PlanShape() of the plan.
  std::string plan_shape;
  double predicted_seconds = 0;
  double measured_seconds = 0;
  double loss = 0;
  /// The planner's cost-model parameter version (0 for bucket plans).
  int64_t params_version = 0;
};

/// The plan-derived fields of `plan`'s record (step, sp_sizes,
/// micro_batches, recompute, plan_shape, predicted_seconds); the caller adds
/// what was measured.
StepRecord StepRecordOfPlan(const Plan& plan, int64_t step);

/// The same for a plan that re-groups the ranks within the step: the
/// per-group fields list every phase's groups, phase after phase, and
/// plan_shape is PhasedPlanShape(); predicted_seconds is the whole step's.
StepRecord StepRecordOfPhasedPlan(const PhasedPlan& plan, int64_t step);

/// "SP[2,1,1] mb[1,3,2] recompute[0,0-1,0]": per group of the plan, its SP
/// size, its micro-batch count and its checkpointed layers (a range when its
/// micro-batches differ).
std::string PlanShape(const Plan& plan);

/// "phases 2: SP[8,8] mb[1,1] recompute[0,0] then SP[16] mb[1] recompute[2]":
/// the phase count, then each phase's PlanShape() in order.
std::string PhasedPlanShape(const PhasedPlan& plan);

/// A whole run. Plain value.
struct RunSummary {
  /// "planner" or "bucket".
  std::string plan_source;
  std::string model;
  int world_size = 0;
  std::string workload;
  uint64_t workload_seed = 0;
  /// Steps run: [first_step, next_step) of steps_requested.
  int64_t first_step = 0;
  int64_t next_step = 0;
  int64_t steps_requested = 0;
  bool stopped_on_request = false;
  std::vector<StepRecord> steps;

  /// Means over steps[from..]; 0 when there are none.
  double MeanMeasuredSeconds(size_t from = 0) const;
  double MeanPredictedSeconds(size_t from = 0) const;
  /// Mean of |predicted - measured| / measured over steps[from..] with a
  /// measurement (> 0); 0 when there are none.
  double MeanRelativeError(size_t from = 0) const;
  /// Median (the mean of the middle two for an even count) of
  /// |predicted - measured| / measured over steps[from, to) with a
  /// measurement; 0 when there are none.
  double MedianRelativeError(size_t from = 0,
                             size_t to = static_cast<size_t>(-1)) const;
};

/// Writes `summary` to `path` as JSON (with its means over every step, for
/// people reading the file), atomically and durably
/// (common/atomic_file.h). The error names the path.
absl::Status WriteRunSummary(const std::string& path,
                             const RunSummary& summary);

/// Reads what WriteRunSummary wrote. NOT_FOUND when there is no file at
/// `path`; DATA_LOSS naming the path and the field for a file that is not
/// such a summary.
absl::StatusOr<RunSummary> ReadRunSummary(const std::string& path);

}  // namespace dcp

#endif  // DCP_WORKER_RUN_SUMMARY_H_
