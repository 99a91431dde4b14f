#ifndef DCP_PLANNER_SIMULATOR_H_
#define DCP_PLANNER_SIMULATOR_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "cost_model/cost_model.h"
#include "planner/strategies/baselines.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"
#include "planner/search/planner.h"
#include "planner/simulate/strategy_registry.h"
#include "planner/workload/workload.h"

namespace dcp {

/// What Simulate() runs.
struct SimulationOptions {
  /// Global batches to plan (>= 1).
  int steps = 10;
  /// How `bucket` and `packed` are configured. A zero
  /// `workload_max_length_tokens` is replaced by the stream source's maximum.
  StaticOptions static_options;
  /// How the `dcp` strategies plan (the ablations override one option each).
  /// Its `sp_sizes` also restrict the SP sizes of the lower bound.
  PlannerOptions planner_options;
  /// Strategies to run, reported in this order; names from StrategyNames()
  /// (planner/simulate/strategy_registry.h), each at most once.
  std::vector<std::string> strategies = {
      "bucket",       "packed",       "best-static", "megatron-dyncp",
      "megatron-hcp", "videosys-dcp", "dcp",         "dcp-fixed-accum",
      "dcp-uniform-recompute"};
  /// megatron-hcp with each micro-batch recomputing only what it needs
  /// (a more generous variant than Megatron's one `--recompute-num-layers`
  /// for the run; see MegatronDynCpSetting).
  bool megatron_least_recompute_per_micro_batch = false;
  /// Keep every step's lengths and every strategy's plans in the report
  /// (for drawing them); memory grows with steps x plan size.
  bool keep_plans = false;
};

/// One strategy's predicted performance over the simulated batches.
struct StrategyStats {
  std::string name;
  /// Mean over steps of the predicted step time.
  double mean_step_seconds = 0;
  /// bucket's mean step time / this strategy's (ratio of means over the same
  /// batches); 1 for bucket itself.
  double speedup_vs_bucket = 0;
  /// best-static's mean step time / this strategy's; 0 when best-static was
  /// not simulated.
  double speedup_vs_best_static = 0;
  /// Strategy::setting(): best-static's chosen setting, e.g. "packed SP 8";
  /// the Megatron schedulers' tuned cap and recompute; else empty.
  std::string setting;
  /// Mean over steps of the phases a step runs in (1 for single-layout
  /// strategies; more for peers that re-group within a step).
  double mean_phases = 1;
  /// Mean over steps of MeanIdleFraction().
  double mean_idle_fraction = 0;
  /// Largest predicted peak bytes of any micro-batch of any step over the
  /// memory budget (<= 1 for plans that fit).
  double max_memory_fraction = 0;
  /// Mean over steps of (predicted - lower bound) / lower bound.
  double mean_gap_to_lower_bound = 0;
  int steps = 0;
  /// Predicted step time of each step, in step order.
  std::vector<double> step_seconds;
  /// Each step's plan (predictions and lower bound filled), with
  /// SimulationOptions::keep_plans; empty otherwise, and empty for the
  /// strategies that may re-group (Strategy::phased()), which fill
  /// `phased_plans` (a step they planned in one layout as one phase).
  std::vector<Plan> plans;
  std::vector<PhasedPlan> phased_plans;
};

/// The result of Simulate(). Plain value.
struct SimulationReport {
  std::vector<StrategyStats> strategies;
  /// Mean over steps of StepTimeLowerBound().
  double lower_bound_mean_step_seconds = 0;
  /// StepTimeLowerBound() of each step.
  std::vector<double> lower_bound_step_seconds;
  /// Each step's sequence lengths, with SimulationOptions::keep_plans.
  std::vector<std::vector<int64_t>> batch_lengths;
  /// Wall time of the `dcp` strategy's PlanBatch by the injected clock,
  /// percentiles over steps (0 if `dcp` was not run).
  double plan_latency_p50_ms = 0;
  double plan_latency_p99_ms = 0;
  int steps = 0;
  /// The length source and batch options.
  std::string workload_description;
};

/// Plans `options.steps` global batches drawn from `batches` with every
/// requested strategy, predicts each plan with the cost model and the lower
/// bound, and summarises. `bucket` is always planned (it is the speedup
/// baseline) even when not reported. `progress`, if set, is called after each
/// step with (steps done, steps). Deterministic apart from the plan
/// latencies. Errors: INVALID_ARGUMENT for bad options (an unknown strategy
/// lists the valid names); planning errors are returned with the step number
/// prefixed. Not thread-safe with respect to `batches`.
absl::StatusOr<SimulationReport> Simulate(
    const CostModel& cost_model, BatchStream& batches,
    const SimulationOptions& options, const Clock& clock,
    std::function<void(int step, int steps)> progress = nullptr);

/// {"strategies": [{"name", "mean_step_seconds", "speedup_vs_bucket",
///   "mean_idle_fraction", "max_memory_fraction", "mean_gap_to_lower_bound",
///   "steps"}, ...], "lower_bound_mean_step_seconds",
///  "plan_latency_ms": {"p50", "p99"}, "steps", "workload"}
std::string SimulationReportToJson(const SimulationReport& report);

/// An aligned table for humans, one row per strategy, then the lower bound,
/// plan latency and workload.
std::string SimulationReportToTable(const SimulationReport& report);

}  // namespace dcp

#endif  // DCP_PLANNER_SIMULATOR_H_
