// The search's vocabulary for one candidate: which groups there are, what
// each runs, and what a group's time is.

#ifndef DCP_PLANNER_SEARCH_ASSIGNMENT_H_
#define DCP_PLANNER_SEARCH_ASSIGNMENT_H_

#include <functional>
#include <vector>

namespace dcp {

/// One candidate: which group (by size index) each group is, and which
/// sequences each group runs. Plain value.
struct Assignment {
  std::vector<int> group_size_index;
  /// Each longest first, ties by index (BatchTable::LongerFirst).
  std::vector<std::vector<int>> group_sequences;
  /// Largest group load by the additive estimates.
  double estimated_seconds = 0;
};

/// What one group's micro-batches take. Plain value.
struct GroupTime {
  double seconds = 0;
  /// Backward of the last micro-batch: what can hide the all-reduce.
  double last_backward_seconds = 0;
};

/// Times a group running `sequences` (longest first) at `sp_size`, in the
/// search's current mode.
using GroupTimer =
    std::function<GroupTime(const std::vector<int>& sequences, int sp_size)>;

}  // namespace dcp

#endif  // DCP_PLANNER_SEARCH_ASSIGNMENT_H_
