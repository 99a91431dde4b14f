#ifndef DCP_PLANNER_PLANNER_H_
#define DCP_PLANNER_PLANNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/strategies/baselines.h"
#include "planner/plan/plan.h"

namespace dcp {

/// One stage of a plan's search passed (for progress on long plans).
struct PlanningProgress {
  /// What was done, e.g. "priced 1048576 sequences (28311 distinct lengths)
  /// on 4 SP sizes".
  std::string message;
};

struct PlannerOptions {
  /// Groups may run different numbers of micro-batches. Off: every group
  /// runs the same count (the fewest that lets every group fit memory).
  bool variable_accumulation = true;
  /// Each micro-batch recomputes only what it needs to fit. Off: one
  /// recompute setting (the most any micro-batch needs) for the whole step.
  bool pyramid_recompute = true;
  /// SP sizes to consider; empty means every legal size.
  std::vector<int> sp_sizes;
  /// Name written into Plan::strategy.
  std::string strategy_name = "dcp";
  /// The static configurations (see baselines.h) the search also considers,
  /// so that a plan is never predicted slower than static training.
  StaticOptions static_options;
  /// Called on the planning thread after each stage of the search (a few
  /// dozen calls per batch at most); empty: none. A Planner shared between
  /// threads calls it from each of them.
  std::function<void(const PlanningProgress&)> progress;
};

/// The data-centric planner: for one global batch it chooses a partition of
/// the ranks into SP groups of heterogeneous sizes (laid out in aligned
/// blocks inside nodes, whole nodes above), which sequences each group runs in
/// how many micro-batches, and the fewest checkpointed layers per
/// micro-batch, minimising the predicted step time (batches of up to 64
/// sequences are refined further: swaps, two groups' sequences split anew,
/// one group's SP size changed). Deterministic: the same
/// inputs give the same plan. Immutable after construction; thread-safe.
class Planner {
 public:
  Planner(const CostModel& cost_model, PlannerOptions options)
      : cost_model_(cost_model), options_(std::move(options)) {}

  /// Errors: INVALID_ARGUMENT for a bad batch or SP option,
  /// RESOURCE_EXHAUSTED for a sequence that fits nowhere.
  absl::StatusOr<Plan> PlanBatch(absl::Span<const int64_t> lengths_tokens) const;

 private:
  const CostModel& cost_model_;
  PlannerOptions options_;
};

}  // namespace dcp

#endif  // DCP_PLANNER_PLANNER_H_
