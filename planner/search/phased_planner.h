#ifndef DCP_PLANNER_PHASED_PLANNER_H_
#define DCP_PLANNER_PHASED_PLANNER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/phased_plan.h"
#include "planner/search/planner.h"

namespace dcp {

/// What the phased search tries (the single-layout plan is always tried).
struct PhasedPlannerOptions {
  /// How the single-layout planner plans the whole batch and each phase.
  /// Its strategy_name names the result.
  PlannerOptions planner_options;
  /// Longest-sequence counts k tried for the first phase are 1, 2, 4, ...
  /// (powers of two) up to this share of the batch's sequences.
  double max_long_share = 0.25;
  /// Shares of the other sequences' tokens that join the long ones in the
  /// first phase: 0, 1/n, ..., (n-1)/n for n = this.
  int short_share_steps = 8;
  /// Phases are searched only where the single-layout plan's gap to the
  /// lower bound is at least this: the bound also bounds phased plans, so a
  /// smaller gap leaves at most that much to gain. 0: always searched.
  double min_gap_to_try = 0.03;
  /// Plans the two-phase candidates best-first by their phases' lower
  /// bounds and skips each whose bounds (after its first phase is planned,
  /// that phase's time and the second's bound) already reach the fastest
  /// plan found so far: such a candidate cannot be strictly faster, so
  /// within the budget below the result is the exhaustive search's (up to
  /// exact ties). Off (exhaustive, no budget) only to test that.
  bool skip_bounded_candidates = true;
  /// A deterministic budget: the search stops, keeping the best plan found,
  /// before a candidate would take the sequences its phases have planned
  /// past `batches_planned` times the batch's (each candidate plans the
  /// batch once over, in two parts), but at least `min_sequences_planned`
  /// and at most `max_sequences_planned`. The defaults keep a 2M-token
  /// batch on 32 GPUs within 100 ms and any batch on 4,096 GPUs within
  /// about a second more than its single-layout plan (planner_benchmark);
  /// small batches, whose candidates cost little, search them all.
  double batches_planned = 4;
  int64_t min_sequences_planned = 8192;
  int64_t max_sequences_planned = int64_t{1} << 18;
};

/// dcp with re-grouping within a step: a two-phase search over the
/// single-layout planner (Planner, called through its public API). Phase 1
/// runs the k longest sequences, plus the longest of the rest up to a share
/// of their tokens, on a layout the planner chooses for them (the large
/// groups the long sequences need, the other ranks in groups of their
/// own); after a barrier, phase 2 runs the remaining sequences on a fresh
/// layout (typically small groups). k and the share are chosen by the cost
/// model (PredictPhasedPlan: the sum of the phases' slowest groups plus
/// the exposed all-reduce). The single-layout plan, as one phase, is kept
/// unless a two-phase plan is predicted strictly faster, so the result is
/// never predicted slower than Planner's. Candidates that their phases'
/// lower bounds (SequenceBounds) show cannot win are not planned, which
/// keeps the search within a few single-layout plans' time. Deterministic. The lower bound
/// (StepTimeLowerBound) is filled: it also bounds phased plans (see
/// phased_planner.cc). Errors: the planner's.
absl::StatusOr<PhasedPlan> PlanPhasedBatch(
    const CostModel& cost_model, absl::Span<const int64_t> lengths_tokens,
    const PhasedPlannerOptions& options);

}  // namespace dcp

#endif  // DCP_PLANNER_PHASED_PLANNER_H_
