#ifndef DCP_PLANNER_LIMITS_H_
#define DCP_PLANNER_LIMITS_H_

// What one global batch may hold, for the planner core, the command line,
// batch formation and the planner service alike.

#include <cstdint>

namespace dcp {

/// Longest sequence (2^40 tokens): far beyond anything plannable, small
/// enough that sums and squares over a batch stay exact in int64 and double.
inline constexpr int64_t kMaxSequenceTokens = int64_t{1} << 40;

/// Most sequences in one global batch (2^20): bounds the memory and time of
/// planning one batch.
inline constexpr int64_t kMaxBatchSequences = int64_t{1} << 20;

}  // namespace dcp

#endif  // DCP_PLANNER_LIMITS_H_
