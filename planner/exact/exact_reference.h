#ifndef DCP_PLANNER_EXACT_REFERENCE_H_
#define DCP_PLANNER_EXACT_REFERENCE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/plan.h"

namespace dcp {

/// The most sequences ExactReference takes (its work grows as
/// layouts x groups x 3^n).
inline constexpr int kMaxExactReferenceSequences = 12;

/// The optimum under the cost model of a small batch, by exhaustive search
/// over every single-layout plan: every layout of legal SP sizes that
/// PlaceGroups accepts, every assignment of sequences to groups and every
/// split of a group's sequences into micro-batches, each micro-batch at the
/// fewest checkpointed layers that fit (more recompute only costs time),
/// its largest-backward micro-batch last. Exact for the slowest group; the
/// exposed gradient all-reduce (which depends on which group is slowest and
/// on its last backward) is bracketed: for every layout and every choice of
/// the group that is to be slowest, the assignment minimising the larger
/// of that group's time plus the all-reduce its chosen last micro-batch
/// leaves exposed and every other group's time.
///  * `lower_seconds` is the least such value: no plan is faster (the
///    optimum's own slowest group is one of the choices);
///  * `best_plan` is the fastest of the plans those assignments make, its
///    predicted step `upper_seconds`: no optimum is slower.
/// They meet when the chosen group is indeed the slowest.
/// Plain value.
struct ExactReference {
  Plan best_plan;
  double upper_seconds = 0;
  double lower_seconds = 0;
  /// Layouts searched.
  int layouts = 0;
};

/// INVALID_ARGUMENT for more than kMaxExactReferenceSequences sequences or
/// a bad batch; RESOURCE_EXHAUSTED if some sequence fits no group.
absl::StatusOr<ExactReference> ComputeExactReference(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens);

}  // namespace dcp

#endif  // DCP_PLANNER_EXACT_REFERENCE_H_
