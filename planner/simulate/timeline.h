#ifndef DCP_PLANNER_TIMELINE_H_
#define DCP_PLANNER_TIMELINE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/plan.h"

namespace dcp {

/// What a stretch of a rank's step is spent on.
enum class TimelinePart {
  kForward,
  kRecompute,
  kBackward,
  /// Every Ulysses all-to-all of the micro-batch (forward, recompute and
  /// backward), drawn as one piece after its compute.
  kAllToAll,
  /// The step-end gradient all-reduce, the part not hidden behind the
  /// slowest group's last backward.
  kExposedAllReduce,
  /// The optimizer step, after the all-reduce on every rank.
  kOptimizerStep,
};

/// "forward", "recompute", "backward", "all-to-all", "all-reduce",
/// "optimizer step".
const char* TimelinePartName(TimelinePart part);

/// One stretch of time on a row. Plain value.
struct TimelineBar {
  double start_seconds = 0;
  double duration_seconds = 0;
  TimelinePart part = TimelinePart::kForward;
  /// Index of the micro-batch within its group (-1 for the all-reduce and
  /// the optimizer step).
  int micro_batch = -1;
};

/// One micro-batch of a row as a whole (the outline its parts fill).
struct TimelineMicroBatch {
  double start_seconds = 0;
  double duration_seconds = 0;
  int num_sequences = 0;
  int64_t tokens = 0;
  int checkpointed_layers = 0;
};

/// One row: a group's ranks, which run the same micro-batches at the same
/// times, drawn once with their count; or, past `max_rows`, several groups
/// of one SP size whose busy times are alike, drawn as their slowest member.
struct TimelineRow {
  /// Every rank the row stands for, ascending.
  std::vector<int> ranks;
  int sp_size = 1;
  /// Groups the row stands for (1 unless aggregated).
  int num_groups = 1;
  /// Index into Plan::groups of the group whose bars are drawn.
  int group_index = 0;
  /// The drawn group's micro-batch count (its gradient accumulation).
  int num_micro_batches = 0;
  /// When the drawn group's last micro-batch ends.
  double busy_seconds = 0;
  /// Aggregated rows: the least busy member's busy time (= busy_seconds
  /// otherwise).
  double min_busy_seconds = 0;
  std::vector<TimelineMicroBatch> micro_batches;
  /// Predicted parts, in time order, then the exposed all-reduce.
  std::vector<TimelineBar> bars;
  /// Measured seconds of each drawn micro-batch, when known (see
  /// AttachMeasuredSeconds); empty otherwise.
  std::vector<double> measured_micro_batch_seconds;
  /// "ranks 0-3" or "ranks 0,5,9,... (32)" (at most a few numbers).
  std::string ranks_label;
};

/// A plan laid out in time, one row per group (see TimelineRow), ready to
/// draw. Plain value.
struct Timeline {
  std::string strategy;
  int num_ranks = 0;
  double step_seconds = 0;
  double slowest_group_seconds = 0;
  double exposed_allreduce_seconds = 0;
  /// 0 when the plan has none.
  double lower_bound_seconds = 0;
  /// Mean over ranks of the fraction of the step spent waiting.
  double idle_fraction = 0;
  std::vector<TimelineRow> rows;
  /// Groups of the plan (rows may stand for several).
  int num_groups_in_plan = 0;
  /// Measured step seconds, when attached.
  std::optional<double> measured_step_seconds;
};

struct TimelineOptions {
  /// Rows drawn at most; beyond it, groups of one SP size with similar busy
  /// times share a row (>= 1).
  int max_rows = 256;
};

/// Lays out `plan` (its predictions filled, see PredictPlan) with the cost
/// model's per-part times of every micro-batch. INVALID_ARGUMENT for a plan
/// whose sequence indices fall outside `lengths_tokens`, with no groups, or
/// for max_rows < 1.
absl::StatusOr<Timeline> BuildTimeline(const CostModel& cost_model,
                                       absl::Span<const int64_t> lengths_tokens,
                                       const Plan& plan,
                                       const TimelineOptions& options = {});

/// Attaches measured seconds per micro-batch: `per_group[g][m]` for group g
/// of the plan the timeline was built from (a row shows its drawn group's;
/// an empty list: the group was not measured, its row has no measured bars).
/// INVALID_ARGUMENT when the shape differs from the plan's (naming the group)
/// or a time is negative or not finite.
absl::Status AttachMeasuredSeconds(
    const std::vector<std::vector<double>>& per_group,
    std::optional<double> measured_step_seconds, Timeline& timeline);

}  // namespace dcp

#endif  // DCP_PLANNER_TIMELINE_H_
