#ifndef DCP_PLANNER_VALIDATE_H_
#define DCP_PLANNER_VALIDATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/plan.h"

namespace dcp {

/// Checks that `plan` is a legal plan of the batch `lengths_tokens` on the
/// cost model's model and cluster, independently of the planner (memory is
/// recomputed from the cost model, not read from the plan's predictions):
///  * every length is positive and every sequence index is in range and
///    planned exactly once;
///  * every rank is in [0, world), in exactly one group, and every rank is in
///    some group;
///  * every group's size divides the model's KV-head count; a group of at
///    most GPUs-per-node ranks is a contiguous block aligned to its size
///    (so inside one node) and its size divides GPUs-per-node; a larger
///    group's size is a multiple of GPUs-per-node and it covers whole nodes;
///  * every micro-batch is non-empty, checkpoints between 0 and num_layers
///    layers, and its recomputed peak bytes fit MemoryBudgetBytes().
/// Returns OK, or INVALID_ARGUMENT listing the problems found (up to ten),
/// each naming the group, micro-batch, rank or sequence and the numbers.
/// Never crashes on a malformed plan.
absl::Status ValidatePlan(const CostModel& cost_model,
                          absl::Span<const int64_t> lengths_tokens,
                          const Plan& plan);

/// ValidatePlan without the memory check, for a worker that knows the model
/// and cluster but not the parameters the planner fitted: sequences, ranks,
/// group sizes and layouts, and checkpointed layers in range.
absl::Status ValidatePlanStructure(const ModelSpec& model,
                                   const ClusterSpec& cluster,
                                   absl::Span<const int64_t> lengths_tokens,
                                   const Plan& plan);

}  // namespace dcp

#endif  // DCP_PLANNER_VALIDATE_H_
