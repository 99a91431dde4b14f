#include "planner/strategies/named_strategy.h"

#include <algorithm>
#include <utility>

namespace dcp {

StaticOptions WithWorkloadMax(
    StaticOptions base, const std::vector<absl::Span<const int64_t>>& batches) {
  if (base.workload_max_length_tokens != 0) return base;
  for (absl::Span<const int64_t> batch : batches) {
    for (int64_t length : batch) {
      base.workload_max_length_tokens =
          std::max(base.workload_max_length_tokens, length);
    }
  }
  return base;
}

absl::StatusOr<StrategyPlan> NamedStrategy::Priced(
    absl::StatusOr<Plan> plan, absl::Span<const int64_t> lengths) const {
  if (!plan.ok()) return plan.status();
  plan->strategy = name_;
  PredictPlan(cost_model_, lengths, *plan);
  StrategyPlan result;
  result.plan = *std::move(plan);
  return result;
}

absl::StatusOr<StrategyPlan> NamedStrategy::Priced(
    absl::StatusOr<PhasedPlan> phased, absl::Span<const int64_t> lengths) const {
  if (!phased.ok()) return phased.status();
  phased->strategy = name_;
  for (Plan& phase : phased->phases) phase.strategy = name_;
  PredictPhasedPlan(cost_model_, lengths, *phased);
  StrategyPlan result;
  result.phased = *std::move(phased);
  return result;
}

}  // namespace dcp
