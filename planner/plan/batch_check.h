#ifndef DCP_PLANNER_BATCH_CHECK_H_
#define DCP_PLANNER_BATCH_CHECK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"

namespace dcp {

/// Rejects an empty batch, one of more than kMaxBatchSequences sequences, or
/// a length outside 1..kMaxSequenceTokens (naming its index).
absl::Status ValidateBatch(absl::Span<const int64_t> lengths_tokens);

/// SP sizes a plan may use on this model and cluster: sizes that divide the
/// attention-head count (Ulysses; KV heads are replicated where the size
/// does not divide their count), fit in the world, and either divide the GPUs per
/// node (the group stays inside a node) or are a multiple of it (whole
/// nodes). `requested` (empty = all) restricts them; a requested size that
/// is not legal is an error saying why.
absl::StatusOr<std::vector<int>> LegalSpSizes(const CostModel& cost_model,
                                              absl::Span<const int> requested);

/// For solvers that only take small batches: ValidateBatch, then
/// INVALID_ARGUMENT when the batch has more than `max_sequences` sequences
/// (naming `solver`, e.g. "the MILP reference"), then LegalSpSizes.
absl::StatusOr<std::vector<int>> SmallBatchSpSizes(
    const CostModel& cost_model, absl::Span<const int> requested,
    absl::Span<const int64_t> lengths_tokens, int max_sequences,
    absl::string_view solver);

/// The largest CP size a Megatron-style scheduler (CP sizes the powers of
/// two from 1) may use over the legal SP sizes of `requested`: the largest
/// power of two all of whose smaller powers of two are legal too.
/// INVALID_ARGUMENT naming `strategy` when SP size 1 is not legal.
absl::StatusOr<int> LargestPowerOfTwoCpSize(const CostModel& cost_model,
                                            absl::Span<const int> requested,
                                            absl::string_view strategy);

/// RESOURCE_EXHAUSTED when the weights, gradients and optimizer states alone
/// exceed the per-GPU budget, saying how much they need and what would help:
/// more GPUs (and how many) when ZeRO-1's optimizer shard is what does not
/// fit, a GPU with more memory or a smaller model when the replicated part
/// (weights, gradients, communicators; the optimizer states too without
/// ZeRO-1), which no GPU count shrinks, exceeds the budget by itself.
absl::Status CheckModelStateFits(const CostModel& cost_model);

/// The smallest of `sp_sizes` on which a micro-batch holding only this
/// sequence fits memory with full recompute, or RESOURCE_EXHAUSTED naming the
/// sequence (a negative index means the workload's longest), its length, the
/// bytes it needs at the largest SP and the budget.
absl::StatusOr<int> MinFeasibleSpSize(const CostModel& cost_model,
                                      absl::Span<const int> sp_sizes,
                                      int sequence_index,
                                      int64_t length_tokens);

}  // namespace dcp

#endif  // DCP_PLANNER_BATCH_CHECK_H_
