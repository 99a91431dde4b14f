// The named strategies: dcp, its ablations and its re-grouping search, and
// the peers it is compared with. The one place a strategy's name maps to
// its code: the simulator, `dcp plan` and `dcp simulate` make strategies
// here and then use them only through the Strategy interface.
//
// To add a strategy: implement Strategy (planner/strategies/strategy.h,
// usually over NamedStrategy in named_strategy.h); a peer in
// planner/strategies/ gets its name and case in peer_registry.cc (so the
// workers can run its plans too), a dcp variant in planner/search/ its name
// in StrategyNames() and a case in MakeStrategy here; then add it to the
// peer_property_test loop (every plan it makes validates and fits memory).

#ifndef DCP_PLANNER_SIMULATE_STRATEGY_REGISTRY_H_
#define DCP_PLANNER_SIMULATE_STRATEGY_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cost_model/cost_model.h"
#include "planner/search/planner.h"
#include "planner/strategies/baselines.h"
#include "planner/strategies/strategy.h"

namespace dcp {

/// How the strategies of one run are configured. Copied into each strategy.
struct StrategyOptions {
  /// bucket and packed; a zero workload_max_length_tokens is the batch's
  /// longest sequence (the simulator passes its stream's maximum).
  StaticOptions static_options;
  /// How the dcp strategies plan; its sp_sizes also restrict the peers'
  /// SP (CP) sizes.
  PlannerOptions planner_options;
  /// megatron-hcp with each micro-batch recomputing only what it needs
  /// instead of one --recompute-num-layers for the run.
  bool megatron_least_recompute_per_micro_batch = false;
};

/// Every name MakeStrategy accepts, in the order reports list them:
/// bucket, packed, best-static, megatron-dyncp (Megatron-LM's dev-branch
/// dynamic CP: packing-aware greedy placement, rounds without barriers),
/// megatron-hcp (Megatron-LM's main-branch hybrid CP: balanced rounds at
/// barriers), videosys-dcp, dcp, dcp-fixed-accum, dcp-uniform-recompute,
/// dcp-phased (dcp with re-grouping within a step).
std::vector<std::string> StrategyNames();

/// The strategy named `name`, planning with `cost_model` (which must
/// outlive it). INVALID_ARGUMENT naming the valid strategies for an unknown
/// name.
absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(
    absl::string_view name, const CostModel& cost_model,
    const StrategyOptions& options);

}  // namespace dcp

#endif  // DCP_PLANNER_SIMULATE_STRATEGY_REGISTRY_H_
