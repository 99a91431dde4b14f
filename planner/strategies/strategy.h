// Strategy: one way of scheduling a global batch (dcp's own search, or a
// peer dcp is compared with), behind one interface, so that the simulator,
// `dcp plan` and `dcp simulate --write-plans` treat every strategy the same
// way instead of comparing names. The named strategies are made by
// planner/simulate/strategy_registry.h.

#ifndef DCP_PLANNER_STRATEGIES_STRATEGY_H_
#define DCP_PLANNER_STRATEGIES_STRATEGY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"

namespace dcp {

/// What a strategy makes of one batch: one layout for the whole step
/// (`plan`), or a plan that re-groups the ranks within the step (`phased`,
/// two or more phases... or one, for a peer whose round count is one).
/// Exactly one of the two is used: `phased.phases` is empty for a
/// one-layout plan. Every prediction is filled. Plain value.
struct StrategyPlan {
  Plan plan;
  PhasedPlan phased;

  bool IsPhased() const { return !phased.phases.empty(); }
  double predicted_step_seconds() const {
    return IsPhased() ? phased.predicted_step_seconds
                      : plan.predicted_step_seconds;
  }
};

/// One scheduling strategy. A strategy may fix a setting for the whole run
/// (a static SP size, a token cap) from every batch of the run: callers
/// call Tune once with them all before the first PlanBatch when
/// `tuned_over_run()`. Not thread-safe; one per run.
class Strategy {
 public:
  virtual ~Strategy() = default;

  /// The name users select it by ("dcp", "best-static", "megatron-dyncp").
  virtual const std::string& name() const = 0;

  /// Whether its plans re-group the ranks within a step (PhasedPlan).
  virtual bool phased() const = 0;

  /// Whether Tune must see the run's batches before PlanBatch.
  virtual bool tuned_over_run() const { return false; }

  /// Fixes the run's setting from its batches (each a list of sequence
  /// lengths). The default does nothing. The tuner's errors otherwise
  /// (RESOURCE_EXHAUSTED where no setting fits memory).
  virtual absl::Status Tune(
      const std::vector<std::vector<int64_t>>& batches) {
    (void)batches;
    return absl::OkStatus();
  }

  /// The tuned setting in words ("packed SP 8", "cap 8192 tokens/rank, 4
  /// layers checkpointed"); empty where the strategy has none.
  virtual std::string setting() const { return ""; }

  /// Plans one batch and fills every prediction (no lower bound). The
  /// planner's errors (INVALID_ARGUMENT for a batch it cannot plan,
  /// RESOURCE_EXHAUSTED where nothing fits memory).
  virtual absl::StatusOr<StrategyPlan> PlanBatch(
      absl::Span<const int64_t> lengths_tokens) = 0;
};

}  // namespace dcp

#endif  // DCP_PLANNER_STRATEGIES_STRATEGY_H_
