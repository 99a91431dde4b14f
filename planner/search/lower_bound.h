#ifndef DCP_PLANNER_LOWER_BOUND_H_
#define DCP_PLANNER_LOWER_BOUND_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"

namespace dcp {

/// A lower bound on the predicted step time of any legal plan of this batch,
/// computed independently of the planner: the larger of (a) the batch's
/// total best-case GPU-seconds over the GPU count and (b) the longest
/// single sequence's best time alone in a micro-batch, where a sequence's
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
  /// the GPU count and the longest sequence's least time alone.
  double SlowestGroupSeconds() const;
  /// The same for a plan of only the sequences `members` (indices into the
  /// batch, each valid), such as one phase of a phased plan.
  double SlowestGroupSeconds(absl::Span<const int> members) const;
  /// A lower bound on the step time of a plan (or on the last phase plus
  /// the step's end) whose slowest group takes at least
  /// `slowest_group_seconds`: the all-reduce its last backward cannot hide
  /// and the optimizer step added. Increasing in its argument.
  double StepSeconds(double slowest_group_seconds) const;

 private:
  SequenceBounds() = default;
  std::vector<double> gpu_seconds_;    // [sequence] least GPU-seconds
  std::vector<double> alone_seconds_;  // [sequence] least time alone
  int num_gpus_ = 1;
  double forward_share_ = 0;
  double allreduce_seconds_ = 0;
  double optimizer_seconds_ = 0;
};

}  // namespace dcp

#endif  // DCP_PLANNER_LOWER_BOUND_H_
