#ifndef DCP_PLANNER_PACKING_H_
#define DCP_PLANNER_PACKING_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "cost_model/saturating_math.h"

namespace dcp {

/// Tokens one rank of an SP group of `sp_size` holds for this sequence
/// (padded up to a multiple of the SP size).
inline int64_t TokensPerRank(int64_t length_tokens, int sp_size) {
  return CeilDivide(length_tokens, sp_size);
}

/// `sequence_indices` (valid indices into `lengths_tokens`) longest first,
/// ties by index. Deterministic.
std::vector<int> LongestFirst(absl::Span<const int> sequence_indices,
                              absl::Span<const int64_t> lengths_tokens);

/// Every index of `lengths_tokens`, longest first, ties by index: as
/// LongestFirst of all of them. Deterministic.
std::vector<int> LongestFirst(absl::Span<const int64_t> lengths_tokens);

/// Packs sequences into micro-batches of at most `capacity_tokens_per_rank`
/// tokens per rank, first-fit decreasing by length (ties by index). A
/// sequence over the capacity gets a micro-batch of its own. Deterministic.
std::vector<std::vector<int>> PackFirstFitDecreasing(
    absl::Span<const int> sequence_indices,
    absl::Span<const int64_t> lengths_tokens, int sp_size,
    int64_t capacity_tokens_per_rank);

/// PackFirstFitDecreasing for sequences already in its order (longest first,
/// ties by index), given by their lengths in that order: bins hold positions
/// in `lengths_in_order`, and map through that order to the bins
/// PackFirstFitDecreasing makes. Reads the lengths once, in order (callers
/// that keep sorted lists save the sort and the scattered reads).
std::vector<std::vector<int>> PackFirstFitInOrder(
    absl::Span<const int64_t> lengths_in_order, int sp_size,
    int64_t capacity_tokens_per_rank);

/// Splits sequences into `num_bins` bins balanced by tokens per rank
/// (longest first into the lightest bin, ties by index); empty bins are
/// dropped. Deterministic.
std::vector<std::vector<int>> BalanceIntoBins(
    absl::Span<const int> sequence_indices,
    absl::Span<const int64_t> lengths_tokens, int sp_size, int num_bins);

}  // namespace dcp

#endif  // DCP_PLANNER_PACKING_H_
