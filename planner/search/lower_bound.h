#ifndef DCP_PLANNER_LOWER_BOUND_H_
#define DCP_PLANNER_LOWER_BOUND_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"

namespace dcp {

/// A lower bound on the predicted step time of any legal plan of this batch,
/// computed independently of the planner: the largest of (a) the batch's
/// total best-case GPU-seconds over the GPU count, (b) the longest
/// single sequence's best time alone in a micro-batch and (c) the packing
/// bound, the least time for which the sequences that cannot share a GPU
/// fit on GPUs of their own (SequenceBounds::SlowestGroupSeconds), where a sequence's
/// GPU-seconds at SP s count the work proportional to its tokens (no
/// padding or latencies) and its tokens' share of the fixed cost of a
/// micro-batch (layer and GEMM fixed costs, a micro-batch holding at most
/// the memory's capacity of tokens per rank at its recompute), at the
/// checkpointed-layer count (at least what its own tokens force) that
/// makes the two least, minimised over the SP sizes it fits. The gradient all-reduce
/// adds what the slowest group's last backward cannot hide: since a
/// micro-batch's forward takes at least a model-derived share f of its time,
/// the step is at least f * (slowest group) + (all-reduce).
absl::StatusOr<double> StepTimeLowerBound(const CostModel& cost_model,
                                          absl::Span<const int> sp_sizes,
                                          absl::Span<const int64_t>
                                              lengths_tokens);

/// The terms of StepTimeLowerBound per sequence, priced once, so that the
/// bound of any subset of the batch costs a pass over the subset (the phased
/// search bounds each phase with it). Immutable; thread-safe.
class SequenceBounds {
 public:
  /// Errors: StepTimeLowerBound's.
  static absl::StatusOr<SequenceBounds> Create(
      const CostModel& cost_model, absl::Span<const int> sp_sizes,
      absl::Span<const int64_t> lengths_tokens);

  /// A lower bound on the slowest group's seconds of any plan of the whole
  /// batch over every GPU: the larger of the summed least GPU-seconds over
  /// the GPU count, the longest sequence's least time alone, and the
  /// packing bound (lower_bound.cc: sequences too long to share a GPU
  /// within the step must find GPUs of their own).
  double SlowestGroupSeconds() const;
  /// For a plan of only the sequences `members` (indices into the batch,
  /// each valid), such as one phase of a phased plan: the first two terms
  /// only, in one pass over the members.
  double SlowestGroupSeconds(absl::Span<const int> members) const;
  /// A lower bound on the step time of a plan (or on the last phase plus
  /// the step's end) whose slowest group takes at least
  /// `slowest_group_seconds`: the all-reduce its last backward cannot hide
  /// and the optimizer step added. Increasing in its argument.
  double StepSeconds(double slowest_group_seconds) const;

  /// Sequence `index`'s least GPU-seconds over the sizes it fits, and its
  /// least time alone in a micro-batch (the terms the bounds sum and max).
  double GpuSeconds(int index) const {
    return lengths_[length_of_[index]].gpu_seconds;
  }
  double AloneSeconds(int index) const {
    return lengths_[length_of_[index]].alone_seconds;
  }

 private:
  // One SP size a sequence length fits at.
  struct SizeBounds {
    int sp_size = 0;
    double gpu_seconds = 0;    // least GPU-seconds at this size
    double alone_seconds = 0;  // least time alone in a micro-batch
    double added_seconds = 0;  // least busy time it adds to each rank
  };
  // One distinct length of the batch: how many sequences have it, its
  // sizes, and its least GPU-seconds and time alone over them.
  struct LengthBounds {
    int64_t count = 0;
    std::vector<SizeBounds> sizes;
    double gpu_seconds = 0;
    double alone_seconds = 0;
  };

  SequenceBounds() = default;
  double PackingBound() const;

  std::vector<LengthBounds> lengths_;  // in order of first appearance
  std::vector<int> length_of_;         // [sequence] index into lengths_
  double slowest_group_seconds_ = 0;
  int num_gpus_ = 1;
  double forward_share_ = 0;
  double allreduce_seconds_ = 0;
  double optimizer_seconds_ = 0;
};

}  // namespace dcp

#endif  // DCP_PLANNER_LOWER_BOUND_H_
