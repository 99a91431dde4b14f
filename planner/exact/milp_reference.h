#ifndef DCP_PLANNER_MILP_REFERENCE_H_
#define DCP_PLANNER_MILP_REFERENCE_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/plan.h"

namespace dcp {

/// The most sequences ComputeMilpReference takes.
inline constexpr int kMaxMilpReferenceSequences = 64;

/// Bounds on the work of ComputeMilpReference. Plain value.
struct MilpReferenceOptions {
  /// Seconds CBC may spend on one layout's MILP, measured as CBC does: CPU
  /// seconds of this process. CBC checks it between branch-and-bound nodes,
  /// so its root (presolve, cuts) can overrun it on large programs.
  double layout_time_limit_seconds = 20;
  /// Wall-clock seconds for the whole batch (every layout), checked before
  /// each layout; past it the call fails with DEADLINE_EXCEEDED.
  double time_limit_seconds = 600;
  /// A known step time no optimum exceeds (for example dcp's plan): layouts
  /// that cannot beat it are cut off early, and it sizes the big-M terms
  /// and the micro-batch slots. Infinite: none known.
  double upper_bound_seconds = std::numeric_limits<double>::infinity();
  /// A layout's MILP counts as solved when CBC proves its incumbent within
  /// this fraction of its best bound.
  double relative_gap = 1e-4;
  /// The most columns one layout's MILP may have; RESOURCE_EXHAUSTED past it.
  int max_columns = 200000;
  /// Called after each layout with a line of progress (may be empty).
  std::function<void(const std::string&)> progress;
};

/// The optimum under the cost model of a batch of up to
/// kMaxMilpReferenceSequences sequences over every single-layout plan, by
/// one mixed-integer program per layout (PlaceableLayouts) solved by CBC.
/// In each: which group and which micro-batch slot every sequence takes,
/// each used slot's recompute level (any level whose token capacity holds
/// it), which group is the slowest (listed first in the plan) and which of
/// its micro-batches runs last, so that the exposed gradient all-reduce is
/// modelled exactly as PredictPlan prices it. A micro-batch's time is a
/// fixed term plus a sum over its sequences at each level (the cost model
/// is affine in tokens per rank, summed lengths and summed squared lengths
/// at a fixed level; checked on the batch, FAILED_PRECONDITION otherwise);
/// its recompute term, level x (fixed + per-sequence), is linearised with
/// one big-M row per level.
///  * `upper_seconds`: the step of `best_plan` (PredictPlan's), the best
///    plan found (or upper_bound_seconds with an empty plan when nothing
///    beats it);
///  * `lower_seconds`: no single-layout plan is faster: the least over
///    layouts of CBC's proven optimum or, where a layout ran out of time,
///    its best bound.
/// `proven` when the two meet to relative_gap (every layout solved to that
/// gap, or the open ones' bounds above the best plan). Each group has a bounded number of micro-batch slots:
/// twice the level-0 micro-batches its token share needs, plus one (a
/// group's level-0 micro-batches that fit together can merge: one fixed
/// cost less, its largest backward no smaller), capped at its sequences.
/// Plain value.
struct MilpReference {
  Plan best_plan;
  double upper_seconds = 0;
  double lower_seconds = 0;
  bool proven = false;
  /// Layouts solved, and of those solved to relative_gap or cut off.
  int layouts = 0;
  int layouts_proven = 0;
  /// Columns and rows of the largest layout MILP.
  int max_columns = 0;
  int max_rows = 0;
};

/// INVALID_ARGUMENT for a bad batch or more than kMaxMilpReferenceSequences
/// sequences; RESOURCE_EXHAUSTED when some sequence fits no group or a
/// layout's MILP exceeds options.max_columns; DEADLINE_EXCEEDED past
/// options.time_limit_seconds.
absl::StatusOr<MilpReference> ComputeMilpReference(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens,
    const MilpReferenceOptions& options = {});

}  // namespace dcp

#endif  // DCP_PLANNER_MILP_REFERENCE_H_
