// NamedStrategy: what every named strategy (dcp's and the peers') holds and
// does alike: its name, the cost model it plans with, the run's static
// options, and the pricing of what it plans.

#ifndef DCP_PLANNER_STRATEGIES_NAMED_STRATEGY_H_
#define DCP_PLANNER_STRATEGIES_NAMED_STRATEGY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"
#include "planner/strategies/baselines.h"
#include "planner/strategies/strategy.h"

namespace dcp {

/// `base`, its workload maximum (where 0) the longest of `batches`.
StaticOptions WithWorkloadMax(
    StaticOptions base, const std::vector<absl::Span<const int64_t>>& batches);

/// A Strategy with a name, planning on `cost_model` (which must outlive it).
/// Not thread-safe; one per run.
class NamedStrategy : public Strategy {
 public:
  NamedStrategy(std::string name, const CostModel& cost_model,
                StaticOptions static_options)
      : name_(std::move(name)),
        cost_model_(cost_model),
        static_options_(std::move(static_options)) {}
  const std::string& name() const override { return name_; }

 protected:
  /// The run's static options for one batch (WithWorkloadMax).
  StaticOptions StaticOptionsFor(absl::Span<const int64_t> lengths_tokens) const {
    return WithWorkloadMax(static_options_, {lengths_tokens});
  }
  /// The plan named after the strategy and priced with the cost model.
  absl::StatusOr<StrategyPlan> Priced(absl::StatusOr<Plan> plan,
                                      absl::Span<const int64_t> lengths) const;
  absl::StatusOr<StrategyPlan> Priced(absl::StatusOr<PhasedPlan> phased,
                                      absl::Span<const int64_t> lengths) const;

  const std::string name_;
  const CostModel& cost_model_;
  const StaticOptions static_options_;
};

}  // namespace dcp

#endif  // DCP_PLANNER_STRATEGIES_NAMED_STRATEGY_H_
