// The peers dcp is compared with, by name: what the simulator, `dcp plan`
// and the workers' peer plan source (worker/plan_source.h) make them
// through. Pure: no search (the worker links it), no gRPC.

#ifndef DCP_PLANNER_STRATEGIES_PEER_REGISTRY_H_
#define DCP_PLANNER_STRATEGIES_PEER_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cost_model/cost_model.h"
#include "planner/strategies/baselines.h"
#include "planner/strategies/strategy.h"

namespace dcp {

/// How the peers of one run are configured. Copied into each peer.
struct PeerOptions {
  /// bucket and packed; a zero workload_max_length_tokens is the batch's
  /// longest sequence (the simulator passes its stream's maximum).
  StaticOptions static_options;
  /// The SP (CP) sizes the peers may use; empty: every legal size.
  std::vector<int> sp_sizes;
  /// megatron-hcp with each micro-batch recomputing only what it needs
  /// instead of one --recompute-num-layers for the run.
  bool megatron_least_recompute_per_micro_batch = false;
};

/// bucket, packed, best-static, megatron-dyncp (Megatron-LM's dev-branch
/// dynamic CP: packing-aware greedy placement, rounds without barriers),
/// megatron-hcp (Megatron-LM's main-branch hybrid CP: balanced rounds at
/// barriers), videosys-dcp; in the order reports list them.
std::vector<std::string> PeerStrategyNames();

/// Whether `name` is one of PeerStrategyNames().
bool IsPeerStrategy(absl::string_view name);

/// The peer named `name`, planning with `cost_model` (which must outlive
/// it). INVALID_ARGUMENT naming the peers for any other name.
absl::StatusOr<std::unique_ptr<Strategy>> MakePeerStrategy(
    absl::string_view name, const CostModel& cost_model,
    const PeerOptions& options);

}  // namespace dcp

#endif  // DCP_PLANNER_STRATEGIES_PEER_REGISTRY_H_
