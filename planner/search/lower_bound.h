#ifndef DCP_PLANNER_LOWER_BOUND_H_
#define DCP_PLANNER_LOWER_BOUND_H_

#include <cstdint>

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

}  // namespace dcp

#endif  // DCP_PLANNER_LOWER_BOUND_H_
