#ifndef DCP_PLANNER_MEGATRON_DEV_DYNCP_H_
#define DCP_PLANNER_MEGATRON_DEV_DYNCP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/phased_plan.h"

namespace dcp {

/// One CP group of one round of the packing-aware dynamic-CP scheduler:
/// consecutive ranks (in the scheduler's own numbering, before the phase is
/// laid out on the topology) that run one packed micro-batch together.
struct PackedCpGroup {
  /// First rank and rank count (a power of two).
  int first_rank = 0;
  int size = 0;
  /// Indices into the batch, longest first (the order they were placed).
  std::vector<int> sequence_indices;
};

/// One round: every rank of the world is in at most one group (all of
/// them where the world is a power of two within the largest CP size), and each
/// group runs one micro-batch. Rounds follow one another without a barrier:
/// a group starts once all its ranks have finished their previous round.
struct PackedCpRound {
  std::vector<PackedCpGroup> groups;
};

/// The scheduler's inputs that a run fixes once.
struct PackedCpOptions {
  /// `max_seqlen_per_dp_cp_rank`: a group packs at most this many tokens
  /// per rank, and a sequence of L tokens needs at least the next power of
  /// two of L / this ranks.
  int64_t max_tokens_per_rank = 0;
  /// `min_dynamic_context_parallel_size`: no group is smaller.
  int min_cp_size = 1;
  /// The largest CP size the model allows (a power of two; Ulysses needs
  /// it to divide the heads). A sequence that would need more runs on this
  /// many ranks, above the per-rank cap.
  int largest_cp_size = 1;
};

/// Megatron-LM's dev-branch `default_dynamic_cp` scheduler for one global
/// batch over `world_size` ranks, in our words. Rounds are formed until
/// every sequence is placed; each round works on what is left, longest
/// first:
///  * the longest sequence opens a group on the first ranks, at its least
///    CP size; the round's load cap is 1.05 x that sequence's length x the
///    per-rank token cap (the work proxy is length^2 / CP per rank);
///  * each further sequence tries every CP size from its least one upwards
///    by doubling: joining an open group of that size whose packed tokens
///    per rank stay within the cap, or opening a new group on the free
///    ranks with the least load. It takes the choice with the least
///    projected maximum rank load, if that stays within the round's cap
///    (the first such choice on ties); otherwise it waits for a later
///    round;
///  * ranks left without work are filled by doubling the first of the
///    smallest groups (the ranks after it move up), again and again.
/// Adapted here: CP sizes stop at `largest_cp_size` (a sequence that needs
/// more runs there, above the cap, and the round's load cap is then its own
/// load); ranks that no doubling can reach (a world larger than the largest
/// CP size, or not a power of two, where Megatron would make one group of
/// every rank) idle for the round. INVALID_ARGUMENT on a bad batch or
/// options.
absl::StatusOr<std::vector<PackedCpRound>> ScheduleMegatronDevDynCp(
    absl::Span<const int64_t> lengths_tokens, int world_size,
    const PackedCpOptions& options);

/// A run's setting for the dev-branch scheduler.
struct MegatronDevDynCpSetting {
  int64_t max_tokens_per_rank = 0;
  /// `--recompute-num-layers`, one for the whole run.
  int checkpointed_layers = 0;
  /// Mean predicted step time over the batches it was tuned on.
  double mean_step_seconds = 0;

  /// "cap 8192 tokens/rank, 4 layers checkpointed".
  std::string Describe() const;
};

/// The dev-branch scheduler's plan of one batch: one phase per round (laid
/// out on the topology in aligned blocks), one micro-batch per group,
/// priced without barriers (PredictUnbarrieredPhasedPlan).
absl::StatusOr<PhasedPlan> PlanMegatronDevDynCp(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens,
    const MegatronDevDynCpSetting& setting);

/// The setting a user would tune: every per-rank cap of 2^k and 1.5 x 2^k
/// tokens from 512, plus the memory capacity itself (the most tokens a rank
/// holds at full recompute), each with the fewest checkpointed layers that
/// fit every micro-batch it schedules over all `batches`; the least mean
/// predicted step time wins (ties to the smaller cap). RESOURCE_EXHAUSTED
/// when no cap works, INVALID_ARGUMENT for no batches.
absl::StatusOr<MegatronDevDynCpSetting> TuneMegatronDevDynCp(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    const std::vector<std::vector<int64_t>>& batches);

}  // namespace dcp

#endif  // DCP_PLANNER_MEGATRON_DEV_DYNCP_H_
