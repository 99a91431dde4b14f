#ifndef DCP_PLANNER_PHASED_PLAN_H_
#define DCP_PLANNER_PHASED_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/plan.h"

namespace dcp {

/// A schedule that re-groups the ranks within one step, as some peers'
/// schedulers do (Megatron-LM's hybrid context parallel rounds, VideoSys's
/// iterations inside one accumulated step): phases run one after another,
/// each a layout of every rank into SP groups with their micro-batches, and
/// every rank waits at a barrier at the end of each phase. One gradient
/// all-reduce ends the step. The planner's own plans are one phase (Plan).
/// Plain value; thread-compatible.
struct PhasedPlan {
  /// The strategy's name ("megatron-dyncp", "videosys-dcp").
  std::string strategy;
  /// Each phase is a Plan over all ranks of some of the batch's sequences
  /// (indices into the whole batch); a group without micro-batches sits
  /// idle in that phase. Every sequence is in exactly one phase. A phase's
  /// own step and all-reduce fields are not the step's: read the fields
  /// below.
  std::vector<Plan> phases;
  /// Whether every rank waits at a barrier at the end of each phase (dcp's
  /// re-grouping, megatron-hcp, videosys-dcp). Without barriers (Megatron's
  /// dev-branch dynamic CP) a group starts as soon as all its ranks are
  /// done with the previous phase, and the step is the latest finish
  /// (PredictPhasedPlan prices each kind).
  bool barriers = true;
  /// Sum over phases of its slowest group (the barriers make every phase
  /// last as long as its slowest group), plus the exposed all-reduce.
  double predicted_step_seconds = 0;
  /// Sum over phases of its slowest group's seconds.
  double phases_seconds = 0;
  /// Part of the gradient all-reduce not hidden behind the last phase's
  /// slowest group's last backward.
  double exposed_allreduce_seconds = 0;
  /// Independent lower bound on any plan's step time (0 if not computed).
  double lower_bound_seconds = 0;

  /// (predicted - lower bound) / lower bound; 0 without a lower bound.
  double GapToLowerBound() const {
    return RelativeGapToBound(predicted_step_seconds, lower_bound_seconds);
  }
};

/// `plan` as a phased plan of that one phase, with its strategy, step
/// predictions and lower bound; for a plan PredictPlan priced, what
/// PredictPhasedPlan would give it again.
PhasedPlan AsOnePhase(Plan plan);

/// Fills every prediction of `plan` from the cost model: each phase with
/// PredictPlan, then, with barriers, the step as the sum of the phases'
/// slowest groups plus the all-reduce the last phase's slowest group cannot
/// hide; without, as PredictUnbarrieredPhasedPlan. A phased plan of one
/// phase is priced exactly as that Plan. Sequence indices must be valid
/// (ValidatePhasedPlan checks that).
void PredictPhasedPlan(const CostModel& cost_model,
                       absl::Span<const int64_t> lengths_tokens,
                       PhasedPlan& plan);

/// Fills every prediction of `plan` for phases that follow each other
/// without barriers (whatever `plan.barriers` says): each phase's groups are
/// priced with PredictPlan; a group starts when the last of its ranks is
/// free; the step is the latest finish, plus the all-reduce exposed behind
/// the group that finishes last (as that group's phase prices it), plus the
/// optimizer step. `phases_seconds` is the latest finish.
void PredictUnbarrieredPhasedPlan(const CostModel& cost_model,
                                  absl::Span<const int64_t> lengths_tokens,
                                  PhasedPlan& plan);

/// Mean over GPUs of the fraction of the phases' time each GPU waits (for
/// its phase's slowest group, or idle in a phase), after PredictPhasedPlan.
double MeanIdleFraction(const PhasedPlan& plan);

/// The largest predicted peak bytes of any micro-batch of any phase.
double MaxPeakBytes(const PhasedPlan& plan);

/// ValidatePlan's checks for a phased plan: at least one phase; every
/// sequence in exactly one micro-batch of one phase; and each phase a legal
/// layout of all ranks (ranks partitioned, legal SP sizes in aligned blocks
/// or whole nodes) whose micro-batches fit the memory budget.
/// INVALID_ARGUMENT naming the phase, group, micro-batch or sequence.
absl::Status ValidatePhasedPlan(const CostModel& cost_model,
                                absl::Span<const int64_t> lengths_tokens,
                                const PhasedPlan& plan);

/// ValidatePhasedPlan without the memory check (each phase checked with
/// ValidatePlanStructure), for a worker that knows the model and cluster
/// but not the planner's fitted parameters.
absl::Status ValidatePhasedPlanStructure(
    const ModelSpec& model, const ClusterSpec& cluster,
    absl::Span<const int64_t> lengths_tokens, const PhasedPlan& plan);

/// One phase as a plan of its own batch: the phase's sequences in order of
/// appearance, and the phase with its indices renumbered into them.
struct PhaseBatch {
  std::vector<int64_t> lengths_tokens;
  Plan plan;
};
/// The indices of `phase` must be valid for `lengths_tokens`.
PhaseBatch PhaseAsBatch(absl::Span<const int64_t> lengths_tokens,
                        const Plan& phase);

/// The fewest checkpointed layers at which every micro-batch of `plan` fits
/// memory at its group's SP size, or nullopt if one fits at none. With
/// `set_each`, each micro-batch is also set to the fewest it needs itself.
std::optional<int> FewestCheckpointedLayersThatFit(
    const CostModel& cost_model, absl::Span<const int64_t> lengths_tokens,
    PhasedPlan& plan, bool set_each);

/// Every micro-batch of `plan` checkpoints `layers` (one
/// `--recompute-num-layers` for the run).
void SetCheckpointedLayers(PhasedPlan& plan, int layers);

/// A group of a phase before it is placed on ranks.
struct PhaseGroup {
  int sp_size = 1;
  std::vector<MicroBatchPlan> micro_batches;
};

/// The phase of these groups: placed on the topology by PlaceGroups
/// (aligned blocks inside nodes, whole nodes above), ranks no group takes
/// left idle as SP-1 groups without micro-batches. FAILED_PRECONDITION if
/// the sizes exceed the world or cannot be laid out.
absl::StatusOr<Plan> LayOutPhase(const ClusterSpec& cluster,
                                 std::vector<PhaseGroup> groups);

}  // namespace dcp

#endif  // DCP_PLANNER_PHASED_PLAN_H_
