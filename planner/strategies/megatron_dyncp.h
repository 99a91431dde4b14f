#ifndef DCP_PLANNER_MEGATRON_DYNCP_H_
#define DCP_PLANNER_MEGATRON_DYNCP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/phased_plan.h"

namespace dcp {

/// The settings a Megatron-LM run with hybrid (dynamic) context parallel
/// fixes for the whole run.
struct MegatronDynCpSetting {
  /// `max_seqlen_per_dp_cp_rank`: a sub-sample of L tokens runs on the next
  /// power of two of ceil(L / this) ranks.
  int64_t max_tokens_per_rank = 0;
  /// `--recompute-num-layers`: every micro-batch checkpoints this many.
  int checkpointed_layers = 0;
  /// Not Megatron's behaviour, a more generous variant for comparison:
  /// each micro-batch checkpoints the fewest layers at which it fits, and
  /// `checkpointed_layers` is ignored.
  bool least_recompute_per_micro_batch = false;
  /// Mean predicted step time over the batches it was tuned on.
  double mean_step_seconds = 0;

  /// "cap 8192 tokens/rank, 4 layers checkpointed".
  std::string Describe() const;
};

/// Megatron-LM's balanced hybrid-CP scheduler (main branch,
/// `--hybrid-context-parallel`) for one global batch, in our words:
///  * sub-samples longest first; each one's CP size is the next power of two
///    of ceil(length / max_tokens_per_rank) (at most the largest legal SP
///    size: Megatron's ring would go wider, Ulysses here cannot, so such a
///    sub-sample holds more than the cap per rank), its work proxy
///    length^2 / CP;
///  * a round splits the remaining sub-samples into contiguous runs of about
///    equal work, as many as distinct CP sizes, and takes the head of the
///    first run that can be placed: on fresh free GPUs when enough are free,
///    else onto the least-loaded group of its CP size; one micro-batch per
///    sub-sample, so ranks run different micro-batch counts;
///  * once a smaller CP size than the round's first has been placed, the
///    round closes as soon as the ranks' work is within 5% of the largest;
///    then the most loaded group gives back its last sub-sample while that
///    narrows the spread, and empty GPUs are filled by doubling the first
///    smallest group (its sub-samples then run on twice the ranks);
///  * every round ends at a barrier (a phase of the result); the next round
///    takes what is left.
/// Adapted to this cost model: CP sizes must be legal Ulysses SP sizes
/// (`sp_sizes`, LegalSpSizes; the largest caps the doubling, so ranks may
/// idle where Megatron would use a larger ring), and groups are laid out
/// largest first in aligned blocks. Every micro-batch checkpoints
/// `checkpointed_layers` (or, with least_recompute_per_micro_batch, the
/// fewest it needs). The plan may exceed memory at too few layers
/// (ValidatePhasedPlan tells). Predictions are filled, no lower bound.
absl::StatusOr<PhasedPlan> PlanMegatronDynCp(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens,
    const MegatronDynCpSetting& setting);

/// The setting tuned by the simulator, as a user would tune it for the
/// workload: every cap of 2^k and 1.5 x 2^k tokens per rank (512 up to what
/// a rank holds with full recompute), each with the fewest checkpointed
/// layers that fit every micro-batch it schedules (one setting for the
/// run, as `--recompute-num-layers` is), priced over
/// all `batches`; the least mean step time wins (ties to the smaller cap).
/// With `least_recompute_per_micro_batch` each micro-batch recomputes only
/// what it needs instead (and the setting's layers are the most any needs).
/// RESOURCE_EXHAUSTED when no cap works, INVALID_ARGUMENT for no batches.
absl::StatusOr<MegatronDynCpSetting> TuneMegatronDynCp(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    const std::vector<std::vector<int64_t>>& batches,
    bool least_recompute_per_micro_batch = false);

}  // namespace dcp

#endif  // DCP_PLANNER_MEGATRON_DYNCP_H_
