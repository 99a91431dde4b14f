#include "planner/simulate/strategy_registry.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/search/phased_planner.h"
#include "planner/strategies/named_strategy.h"
#include "planner/strategies/peer_registry.h"

namespace dcp {
namespace {

constexpr char kDcp[] = "dcp";
constexpr char kDcpFixedAccum[] = "dcp-fixed-accum";
constexpr char kDcpUniformRecompute[] = "dcp-uniform-recompute";
constexpr char kDcpPhased[] = "dcp-phased";
constexpr char kDcpOneLayout[] = "dcp-one-layout";

// dcp's single-layout search (Planner), or one of its ablations.
class DcpOneLayoutStrategy : public NamedStrategy {
 public:
  DcpOneLayoutStrategy(std::string name, const CostModel& cost_model,
                       const StrategyOptions& options)
      : NamedStrategy(std::move(name), cost_model, options.static_options),
        planner_options_(options.planner_options) {}
  bool phased() const override { return false; }
  absl::StatusOr<StrategyPlan> PlanBatch(
      absl::Span<const int64_t> lengths) override {
    PlannerOptions options = planner_options_;
    options.strategy_name = name_;
    // dcp weighs the same static configurations it is compared against.
    options.static_options = StaticOptionsFor(lengths);
    if (name_ == kDcpFixedAccum) options.variable_accumulation = false;
    if (name_ == kDcpUniformRecompute) options.pyramid_recompute = false;
    return Priced(Planner(cost_model_, std::move(options)).PlanBatch(lengths),
                  lengths);
  }

 private:
  const PlannerOptions planner_options_;
};

// dcp with re-grouping within a step (PlanPhasedBatch over dcp's planner):
// `dcp` as the planner service serves it (phases tried where the single
// layout's gap to the lower bound is at least 3%; a one-layout result is
// returned as a Plan), or `dcp-phased`, which searches phases for every
// batch and always returns a PhasedPlan.
class DcpStrategy : public NamedStrategy {
 public:
  DcpStrategy(std::string name, const CostModel& cost_model,
              const StrategyOptions& options)
      : NamedStrategy(std::move(name), cost_model, options.static_options),
        planner_options_(options.planner_options) {}
  bool phased() const override { return true; }
  absl::StatusOr<StrategyPlan> PlanBatch(
      absl::Span<const int64_t> lengths) override {
    PhasedPlannerOptions phased_options;
    phased_options.planner_options = planner_options_;
    phased_options.planner_options.strategy_name = name_;
    phased_options.planner_options.static_options = StaticOptionsFor(lengths);
    if (name_ == kDcpPhased) phased_options.min_gap_to_try = 0;
    absl::StatusOr<PhasedPlan> planned =
        PlanPhasedBatch(cost_model_, lengths, phased_options);
    if (!planned.ok() || name_ == kDcpPhased || planned->phases.size() > 1) {
      return Priced(std::move(planned), lengths);
    }
    return Priced(std::move(planned->phases.front()), lengths);
  }

 private:
  const PlannerOptions planner_options_;
};

}  // namespace

std::vector<std::string> StrategyNames() {
  std::vector<std::string> names = PeerStrategyNames();
  for (const char* dcp : {kDcp, kDcpOneLayout, kDcpFixedAccum,
                          kDcpUniformRecompute, kDcpPhased}) {
    names.push_back(dcp);
  }
  return names;
}

absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(
    absl::string_view name, const CostModel& cost_model,
    const StrategyOptions& options) {
  const std::string n(name);
  if (n == kDcpOneLayout || n == kDcpFixedAccum ||
      n == kDcpUniformRecompute) {
    return std::make_unique<DcpOneLayoutStrategy>(n, cost_model, options);
  }
  if (n == kDcp || n == kDcpPhased) {
    return std::make_unique<DcpStrategy>(n, cost_model, options);
  }
  if (IsPeerStrategy(n)) {
    PeerOptions peer_options;
    peer_options.static_options = options.static_options;
    peer_options.sp_sizes = options.planner_options.sp_sizes;
    peer_options.megatron_least_recompute_per_micro_batch =
        options.megatron_least_recompute_per_micro_batch;
    return MakePeerStrategy(n, cost_model, peer_options);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown strategy '", name, "'; valid strategies: ",
                   absl::StrJoin(StrategyNames(), ", ")));
}

}  // namespace dcp
