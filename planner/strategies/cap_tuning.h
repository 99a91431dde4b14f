// What the Megatron schedulers' cap tuners share: the caps tried, pricing
// one per-rank token cap over every batch of a run, and keeping the best.

#ifndef DCP_PLANNER_STRATEGIES_CAP_TUNING_H_
#define DCP_PLANNER_STRATEGIES_CAP_TUNING_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/phased_plan.h"

namespace dcp {

/// How one cap did over a run. Plain value.
struct CapOutcome {
  /// The fewest checkpointed layers at which every micro-batch of every
  /// batch fits: the run's one --recompute-num-layers, or, with
  /// per-micro-batch recompute, the most any micro-batch sets itself.
  int checkpointed_layers = 0;
  double mean_step_seconds = 0;
};

/// Plans every batch of `batches` (at least one) with `plan` (a scheduler
/// at cap `cap`), sets the recompute (one setting for the run, or each
/// micro-batch its own with `per_micro_batch`), and prices every plan with
/// PredictPhasedPlan (with or without barriers, as each plan says).
/// Errors: the scheduler's, or RESOURCE_EXHAUSTED naming the cap where a
/// micro-batch fits memory at no recompute.
absl::StatusOr<CapOutcome> PriceCapOverRun(
    const CostModel& cost_model,
    const std::vector<std::vector<int64_t>>& batches, int64_t cap,
    bool per_micro_batch,
    const std::function<absl::StatusOr<PhasedPlan>(absl::Span<const int64_t>)>&
        plan);

/// The caps a tuner tries: 512 x 2^k tokens per rank and 1.5 times that, up
/// to `capacity`, ascending, and `capacity` itself when `with_capacity`
/// (the memory-capacity cap).
std::vector<int64_t> CapGrid(int64_t capacity, bool with_capacity);

/// The fastest of the caps and how it did.
struct TunedCap {
  int64_t cap = 0;
  CapOutcome outcome;
};

/// Prices every cap of `caps` with `price` and keeps the one whose run is
/// fastest (the first of equals). RESOURCE_EXHAUSTED "`name`: no per-rank
/// token cap schedules every batch: ..." with the last cap's error when no
/// cap prices.
absl::StatusOr<TunedCap> TuneCap(
    const std::vector<int64_t>& caps,
    const std::function<absl::StatusOr<CapOutcome>(int64_t)>& price,
    absl::string_view name);

}  // namespace dcp

#endif  // DCP_PLANNER_STRATEGIES_CAP_TUNING_H_
