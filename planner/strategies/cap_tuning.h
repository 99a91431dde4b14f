// What the Megatron schedulers' cap tuners share: pricing one per-rank
// token cap over every batch of a run.

#ifndef DCP_PLANNER_STRATEGIES_CAP_TUNING_H_
#define DCP_PLANNER_STRATEGIES_CAP_TUNING_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/phased_plan.h"

namespace dcp {

/// How one cap did over a run. Plain value.
struct CapOutcome {
  /// The run's one --recompute-num-layers: the fewest at which every
  /// micro-batch of every batch fits (0 with per-micro-batch recompute).
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

}  // namespace dcp

#endif  // DCP_PLANNER_STRATEGIES_CAP_TUNING_H_
