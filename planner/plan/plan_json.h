#ifndef DCP_PLANNER_PLAN_JSON_H_
#define DCP_PLANNER_PLAN_JSON_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"

namespace dcp {

/// Serialises a plan as one JSON object:
///
///     {"strategy", "predicted_step_seconds", "slowest_group_seconds",
///      "lower_bound_seconds", "gap_to_lower_bound",
///      "exposed_allreduce_seconds", "memory_budget_bytes", "num_sequences",
///      "groups": [{"ranks", "sp_size", "predicted_seconds",
///                  "micro_batches": [{"sequence_indices", "tokens",
///                                     "checkpointed_layers",
///                                     "predicted_seconds",
///                                     "predicted_peak_bytes"}]}]}
///
/// `tokens` (real tokens of a micro-batch) comes from `lengths_tokens`, and
/// `memory_budget_bytes` from `cost_model`; the predictions are the plan's
/// own (call PredictPlan first). An out-of-range sequence index counts 0
/// tokens rather than failing, so that invalid plans can still be written
/// out for inspection.
std::string PlanToJson(const Plan& plan,
                       absl::Span<const int64_t> lengths_tokens,
                       const CostModel& cost_model);

/// Reads back what PlanToJson writes: the plan's structure (groups, ranks,
/// micro-batches, sequence indices, checkpointed layers) and its predictions.
/// Derived fields (sp_size, tokens, gap_to_lower_bound, memory_budget_bytes,
/// num_sequences) and unknown fields are ignored; `slowest_group_seconds` is
/// optional (the slowest group's predicted seconds when absent).
/// INVALID_ARGUMENT for text that is not JSON, or for a missing or wrongly
/// typed field, naming its path, e.g.
/// `groups[2].micro_batches[0].sequence_indices[1]`. Does not check that the
/// plan is legal (see ValidatePlan).
absl::StatusOr<Plan> PlanFromJson(absl::string_view json);

/// Checks the derived fields PlanFromJson ignores against what they derive
/// from, so that a file that contradicts itself is not taken as valid:
/// `num_sequences` (the batch's sequence count), each group's `sp_size` (its
/// rank count), each micro-batch's `tokens` (the sum of its sequences'
/// lengths), `memory_budget_bytes` (the cost model's budget) and
/// `gap_to_lower_bound` (from the predicted step and the lower bound in the
/// file). Absent fields are fine. INVALID_ARGUMENT naming the field's path
/// and both values. Call after PlanFromJson succeeded and the indices were
/// checked (ValidatePlan).
absl::Status CheckDerivedFields(absl::string_view json,
                                absl::Span<const int64_t> lengths_tokens,
                                const CostModel& cost_model);

/// A plan that re-groups the ranks within the step, as one JSON object:
///
///     {"strategy", "predicted_step_seconds", "phases_seconds",
///      "lower_bound_seconds", "gap_to_lower_bound",
///      "exposed_allreduce_seconds", "memory_budget_bytes", "num_sequences",
///      "phases": [{"slowest_group_seconds", "groups": [...]}]}
///
/// each phase's "groups" as PlanToJson writes them (sequence indices into
/// the whole batch). Predictions are the plan's own (PredictPhasedPlan).
std::string PhasedPlanToJson(const PhasedPlan& plan,
                             absl::Span<const int64_t> lengths_tokens,
                             const CostModel& cost_model);

/// True when `text` is a JSON object with a "phases" member.
bool PlanJsonHasPhases(absl::string_view text);

/// Reads back what PhasedPlanToJson writes; a plan without "phases" is
/// read with PlanFromJson as one phase. Errors as PlanFromJson's, paths
/// like `phases[1].groups[0].ranks`. Does not check that the plan is legal
/// (see ValidatePhasedPlan).
absl::StatusOr<PhasedPlan> PhasedPlanFromJson(absl::string_view json);

/// CheckDerivedFields for a phased plan: the top-level fields, then each
/// phase's groups (errors prefixed `phases[p].`).
absl::Status CheckPhasedDerivedFields(absl::string_view text,
                                      absl::Span<const int64_t> lengths_tokens,
                                      const CostModel& cost_model);

}  // namespace dcp

#endif  // DCP_PLANNER_PLAN_JSON_H_
