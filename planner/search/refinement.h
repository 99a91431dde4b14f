// Local search over one assignment: moves and swaps of sequences out of the
// slowest group, and splits of two small groups anew.

#ifndef DCP_PLANNER_SEARCH_REFINEMENT_H_
#define DCP_PLANNER_SEARCH_REFINEMENT_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "planner/search/assignment.h"
#include "planner/search/batch_table.h"

namespace dcp {

/// Refines an assignment round by round: each round takes the slowest
/// group (the step is the slowest group plus what of the gradient
/// all-reduce its last backward does not hide) and applies the one move of
/// a sequence to another group, or swap with one there, that most lowers
/// the step. Large batches try a sample of moves to a few targets; small
/// batches (at most kThoroughSequences) try every move and swap, and where
/// none helps, split the slowest group and another of few sequences anew
/// every way. Stops when a round finds nothing, or its budgets run out.
///
/// Deterministic: the same assignment gives the same result. Not
/// thread-safe; `table`, `lengths`, `sizes` and `thorough_sequences_timed`
/// must outlive it.
class Refinement {
 public:
  /// Batches of at most this many sequences are refined thoroughly.
  static constexpr int64_t kThoroughSequences = 64;
  /// Sequences the thorough refinement may time per batch in all (the
  /// counter is the caller's, shared with its other thorough work); past it
  /// refinement goes on as for larger batches.
  static constexpr int64_t kThoroughSequenceBudget = int64_t{1} << 15;

  /// `time_group` prices a group in the caller's current mode;
  /// `all_reduce_seconds` is the step's gradient all-reduce.
  Refinement(const BatchTable& table, absl::Span<const int64_t> lengths,
             const std::vector<int>& sizes, double all_reduce_seconds,
             GroupTimer time_group, int64_t& thorough_sequences_timed);

  Assignment Run(Assignment assignment);

 private:
  /// The best change a round has found so far.
  struct Best {
    double step = 0;
    int position = -1;  // in the slowest group's list; -1: a split
    int target = -1;    // -1: nothing found
    int swap = -1;      // position in the target's list; -1: a move
    GroupTime source_time;
    GroupTime target_time;
  };
  /// One round's view of the assignment.
  struct Round {
    bool thorough = false;
    /// The three slowest groups, slowest first (ties by index).
    std::vector<int> top;
    int slowest = 0;
    int source_size = 0;  // size index of the slowest group
    /// Groups sequences may go to (-1 entries are skipped).
    std::vector<int> targets;
    /// Positions in the slowest group's list to try moving.
    std::vector<int> tried;
    Best best;
  };

  double StepSeconds(const GroupTime& slowest) const;
  Round StartRound(const Assignment& assignment, bool thorough) const;
  /// Keeps the change if the step it leaves is the least so far.
  bool Consider(Round& round, int position, int target, int swap,
                const GroupTime& source_time,
                const GroupTime& target_time) const;
  /// Every tried move (and, thorough, swap) of the slowest group's
  /// sequences.
  void TryMovesAndSwaps(const Assignment& assignment, Round& round);
  /// Thorough rounds where no move helps: the slowest group and each target
  /// of few sequences split anew every way; the best split's mask (bit k:
  /// the k-th longest of both goes to the slowest group).
  uint32_t TryRepartitions(const Assignment& assignment, Round& round);
  void ApplyRepartition(Assignment& assignment, const Round& round,
                        uint32_t mask);
  void ApplyMove(Assignment& assignment, const Round& round);

  const BatchTable& table_;
  absl::Span<const int64_t> lengths_;
  const std::vector<int>& sizes_;
  const double all_reduce_seconds_;
  const GroupTimer time_group_;
  int64_t& thorough_sequences_timed_;
  /// Per group of the assignment being refined.
  std::vector<GroupTime> times_;
  /// Sequences timed by this run (bounded by kRefineSequenceBudget).
  int64_t sequences_timed_ = 0;
};

}  // namespace dcp

#endif  // DCP_PLANNER_SEARCH_REFINEMENT_H_
