#ifndef DCP_PLANNER_LAYOUT_MILP_H_
#define DCP_PLANNER_LAYOUT_MILP_H_

// One layout's MILP: for a layout (the SP size of each group), which
// micro-batch slot of which group every sequence takes, each used slot's
// recompute level (linearised with big-M rows), which group is the slowest
// and which of its micro-batches runs last; it minimises the step (the
// slowest group) plus the exposed gradient all-reduce, in milliseconds and
// without the optimizer step. milp_reference.h documents the formulation;
// ComputeMilpReference builds and solves one per layout.

#include <cstdint>
#include <vector>

#include "planner/exact/cbc_milp.h"

namespace dcp {

/// The cost model on one SP size as affine terms: a micro-batch of the set
/// X at recompute level k takes
///   total(X, k)    = fixed_total + k * fixed_recompute
///                    + sum_{i in X} (total_i + k * recompute_i),
///   backward(X, k) = fixed_backward + k * fixed_recompute
///                    + sum_{i in X} (backward_i + k * recompute_i)
/// seconds, and fits at level k when its tokens per rank are at most
/// capacity[k]. Plain value.
struct AffineSize {
  int sp_size = 0;
  double fixed_total = 0, fixed_backward = 0, fixed_recompute = 0;
  std::vector<double> total, backward, recompute;
  std::vector<int64_t> tokens;    // per rank, per sequence
  std::vector<int64_t> capacity;  // per level 0..num_layers
  std::vector<char> fits;         // sequence fits at some level
};

/// The MILP works in milliseconds (seconds times this): step times of
/// seconds keep its coefficients well inside CBC's tolerances.
inline constexpr double kMilpMilliseconds = 1e3;

/// Whether each of the `n` sequences fits some group of the layout, whose
/// groups' affine terms are `affine`.
bool EverySequenceFits(const std::vector<const AffineSize*>& affine, int n);

/// The big-M of the step, in milliseconds: every sequence alone, fully
/// recomputed (`layers`), one after another on a group it fits, plus the
/// whole all-reduce (`allreduce`, milliseconds); at most the known
/// `upper_bound` (seconds). Needs EverySequenceFits.
double StepBigM(const std::vector<const AffineSize*>& affine, int n, int layers,
                double allreduce, double upper_bound);

/// One layout's MILP, with the columns its plan is rebuilt from. Plain
/// value.
struct LayoutMilp {
  /// One micro-batch slot of a group: its columns.
  struct Slot {
    std::vector<int> x;      // column per sequence, -1 where it cannot go
    std::vector<int> level;  // column per level 0..top
    int recompute = -1;      // recompute milliseconds
    int last = -1;           // this slot runs last in its group
  };
  MilpProblem problem;
  std::vector<std::vector<Slot>> slots;  // per group
  std::vector<int> designated;           // per group: it is the slowest
};

/// Builds the MILP of `layout` (an SP size per group; `affine` holds each
/// group's terms over the `n` sequences) for models of `layers` layers, an
/// all-reduce of `allreduce` and the step's big-M `big` (StepBigM), both in
/// milliseconds. Its columns and rows come in a fixed order: the step and
/// exposed all-reduce columns, each group's slots and the rows that price
/// them, then the row of one designated (slowest) group and one row per
/// sequence placing it in exactly one slot. Needs EverySequenceFits.
LayoutMilp BuildLayoutMilp(const std::vector<int>& layout,
                           const std::vector<const AffineSize*>& affine, int n,
                           int layers, double allreduce, double big);

}  // namespace dcp

#endif  // DCP_PLANNER_LAYOUT_MILP_H_
