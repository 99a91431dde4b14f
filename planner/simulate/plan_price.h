#ifndef DCP_PLANNER_PLAN_PRICE_H_
#define DCP_PLANNER_PLAN_PRICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"

namespace dcp {

/// The cost model's figures for one group of a priced plan.
struct GroupPrice {
  std::vector<int> ranks;
  int micro_batches = 0;
  double seconds = 0;
  /// Waiting for the slowest group.
  double idle_seconds = 0;
  /// Largest micro-batch peak over the memory budget.
  double peak_memory_fraction = 0;
};

/// What a plan costs under the cost model, whoever made it. Plain value.
struct PlanPrice {
  /// The plan with every prediction refilled (PredictPlan) and its lower
  /// bound set: its step, slowest group, exposed all-reduce, lower bound and
  /// GapToLowerBound() are the priced figures.
  Plan plan;
  /// Mean over GPUs of the fraction of the step spent waiting.
  double idle_fraction = 0;
  double peak_memory_fraction = 0;
  std::vector<GroupPrice> groups;
};

/// Prices a plan that the planner may not have made (a user's current
/// configuration, another system's schedule): ValidatePlan's checks first
/// (INVALID_ARGUMENT with its message for an illegal plan, or one over the
/// memory budget), then the cost model's step time, per-group times, idle
/// fraction, peak memory and the gap to StepTimeLowerBound over `sp_sizes`
/// (LegalSpSizes; empty = all). The plan's own predictions are ignored.
absl::StatusOr<PlanPrice> PricePlan(const CostModel& cost_model,
                                    absl::Span<const int64_t> lengths_tokens,
                                    const Plan& plan,
                                    absl::Span<const int> sp_sizes = {});

/// {"strategy", "step_seconds", "slowest_group_seconds",
///  "exposed_allreduce_seconds", "lower_bound_seconds",
///  "gap_to_lower_bound", "idle_fraction", "peak_memory_fraction",
///  "groups": [{"ranks", "sp_size", "micro_batches", "seconds",
///              "idle_seconds", "peak_memory_fraction"}]}
std::string PlanPriceToJson(const PlanPrice& price);

/// The same for people: a summary, then one aligned row per group.
std::string PlanPriceToTable(const PlanPrice& price);

/// What a plan that re-groups the ranks within the step costs. Plain value.
struct PhasedPlanPrice {
  /// The plan with every prediction refilled (PredictPhasedPlan) and its
  /// lower bound set.
  PhasedPlan plan;
  /// MeanIdleFraction: waiting for a phase's slowest group, or idle in it.
  double idle_fraction = 0;
  double peak_memory_fraction = 0;
  /// Per phase, per group (GroupPrice; idle is to the phase's slowest).
  std::vector<std::vector<GroupPrice>> phases;
};

/// PricePlan for a phased plan: ValidatePhasedPlan's checks first (every
/// sequence in exactly one phase, each phase's groups a legal layout of
/// every rank, each micro-batch within the memory budget), then the cost
/// model's figures and the lower bound (which bounds phased plans too).
absl::StatusOr<PhasedPlanPrice> PricePhasedPlan(
    const CostModel& cost_model, absl::Span<const int64_t> lengths_tokens,
    const PhasedPlan& plan, absl::Span<const int> sp_sizes = {});

/// {"strategy", "step_seconds", "phases_seconds",
///  "exposed_allreduce_seconds", "lower_bound_seconds",
///  "gap_to_lower_bound", "idle_fraction", "peak_memory_fraction",
///  "phases": [{"seconds", "groups": [as PlanPriceToJson's]}]}
std::string PhasedPlanPriceToJson(const PhasedPlanPrice& price);

/// The same for people: a summary, then per phase a line and its groups.
std::string PhasedPlanPriceToTable(const PhasedPlanPrice& price);

}  // namespace dcp

#endif  // DCP_PLANNER_PLAN_PRICE_H_
