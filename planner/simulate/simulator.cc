#include "planner/simulate/simulator.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/percentile.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "planner/plan/batch_check.h"
#include "planner/search/lower_bound.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"
#include "planner/simulate/strategy_registry.h"

namespace dcp {
namespace {

constexpr char kBucket[] = "bucket";
constexpr char kBestStatic[] = "best-static";
constexpr char kDcp[] = "dcp";

// One strategy being simulated and its running sums.
struct StrategyRun {
  std::unique_ptr<Strategy> strategy;
  std::string name;
  bool reported = true;
  double sum_step_seconds = 0;
  double sum_idle_fraction = 0;
  double max_memory_fraction = 0;
  double sum_gap_to_lower_bound = 0;
  double sum_phases = 0;
  std::vector<double> step_seconds;
  // Every step's plan, with SimulationOptions::keep_plans.
  std::vector<Plan> plans;
  std::vector<PhasedPlan> phased_plans;
};

absl::Status WithStep(int step, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("step ", step, ": ", status.message()));
}

std::string DescribeWorkload(const BatchStream& batches) {
  const BatchOptions& options = batches.options();
  return absl::StrCat(batches.source().Describe(), "; ",
                      options.global_batch_tokens > 0
                          ? absl::StrCat(options.global_batch_tokens,
                                         " tokens per global batch")
                          : absl::StrCat(options.global_batch_samples,
                                         " sequences per global batch"));
}

// INVALID_ARGUMENT unless `options` asks for at least one step of at least
// one strategy.
absl::Status CheckOptions(const SimulationOptions& options) {
  if (options.steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps = ", options.steps, "; simulate at least 1 step"));
  }
  if (options.strategies.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no strategies to simulate; choose some of ",
                     absl::StrJoin(StrategyNames(), ", ")));
  }
  return absl::OkStatus();
}

// How the strategies are made: `options`' settings, the workload's
// maximum length from the stream's source unless `options` sets one.
StrategyOptions StrategyOptionsFor(const SimulationOptions& options,
                                   const BatchStream& batches) {
  StaticOptions static_options = options.static_options;
  if (static_options.workload_max_length_tokens == 0) {
    static_options.workload_max_length_tokens =
        batches.source().MaxLengthTokens();
  }
  StrategyOptions strategy_options;
  strategy_options.static_options = static_options;
  strategy_options.planner_options = options.planner_options;
  strategy_options.megatron_least_recompute_per_micro_batch =
      options.megatron_least_recompute_per_micro_batch;
  return strategy_options;
}

// The run of the strategy `name` in `runs`, or null.
const StrategyRun* FindRun(const std::vector<StrategyRun>& runs,
                           absl::string_view name) {
  for (const StrategyRun& run : runs) {
    if (run.name == name) return &run;
  }
  return nullptr;
}

// Adds a run of the strategy `name` to `runs`.
absl::Status AddRun(const std::string& name, bool reported,
                    const CostModel& cost_model,
                    const StrategyOptions& strategy_options,
                    std::vector<StrategyRun>& runs) {
  absl::StatusOr<std::unique_ptr<Strategy>> strategy =
      MakeStrategy(name, cost_model, strategy_options);
  if (!strategy.ok()) return strategy.status();
  StrategyRun run;
  run.strategy = *std::move(strategy);
  run.name = name;
  run.reported = reported;
  runs.push_back(std::move(run));
  return absl::OkStatus();
}

// A run of each strategy of `names` in order, each listed once, then one of
// bucket if not among them: bucket is the speedup baseline, planned always,
// reported if asked.
absl::StatusOr<std::vector<StrategyRun>> MakeRuns(
    const std::vector<std::string>& names, const CostModel& cost_model,
    const StrategyOptions& strategy_options) {
  std::vector<StrategyRun> runs;
  for (const std::string& name : names) {
    if (FindRun(runs, name) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy '", name, "' is listed twice; list each once"));
    }
    DCP_RETURN_IF_ERROR(AddRun(name, true, cost_model, strategy_options, runs));
  }
  if (FindRun(runs, kBucket) == nullptr) {
    DCP_RETURN_IF_ERROR(
        AddRun(kBucket, false, cost_model, strategy_options, runs));
  }
  return runs;
}

// The sequence lengths of the next batch of `batches`.
std::vector<int64_t> DrawLengths(BatchStream& batches) {
  std::vector<int64_t> lengths;
  for (const Sample& sample : batches.Next()) {
    lengths.push_back(sample.length_tokens);
  }
  return lengths;
}

// Tunes the strategies with a setting for the whole run over every
// step's batch, `drawn`.
absl::Status TuneOverRun(const std::vector<std::vector<int64_t>>& drawn,
                         std::vector<StrategyRun>& runs) {
  for (StrategyRun& run : runs) {
    if (!run.strategy->tuned_over_run()) continue;
    DCP_RETURN_IF_ERROR(run.strategy->Tune(drawn));
  }
  return absl::OkStatus();
}

// `run`'s plan of a batch, errors prefixed with its name; the `dcp`
// strategy's planning time is added to `dcp_latencies_ms`.
absl::StatusOr<StrategyPlan> PlanBatch(
    const std::vector<int64_t>& lengths_tokens, const Clock& clock,
    StrategyRun& run, std::vector<double>& dcp_latencies_ms) {
  const bool timed = run.name == kDcp;
  const absl::Time start = timed ? clock.Now() : absl::InfinitePast();
  absl::StatusOr<StrategyPlan> planned =
      run.strategy->PlanBatch(lengths_tokens);
  if (timed) {
    dcp_latencies_ms.push_back(absl::ToDoubleMilliseconds(clock.Now() - start));
  }
  if (!planned.ok()) {
    return absl::Status(
        planned.status().code(),
        absl::StrCat(run.name, ": ", planned.status().message()));
  }
  return planned;
}

// Sets the lower bound of `plan` (a Plan or a PhasedPlan of `phases`
// phases) and adds it to `run`'s idle, memory, gap and phase sums.
template <typename AnyPlan>
void AddPlanToSums(double lower_bound, double budget_bytes, size_t phases,
                   AnyPlan& plan, StrategyRun& run) {
  plan.lower_bound_seconds = lower_bound;
  run.sum_idle_fraction += MeanIdleFraction(plan);
  run.max_memory_fraction =
      std::max(run.max_memory_fraction, MaxPeakBytes(plan) / budget_bytes);
  run.sum_gap_to_lower_bound += plan.GapToLowerBound();
  run.sum_phases += phases;
}

// Adds a step's plan, of lower bound `lower_bound`, to `run`'s sums.
void AddToSums(double lower_bound, double budget_bytes, StrategyPlan& planned,
               StrategyRun& run) {
  if (planned.IsPhased()) {
    AddPlanToSums(lower_bound, budget_bytes, planned.phased.phases.size(),
                  planned.phased, run);
  } else {
    AddPlanToSums(lower_bound, budget_bytes, 1, planned.plan, run);
  }
  run.sum_step_seconds += planned.predicted_step_seconds();
  run.step_seconds.push_back(planned.predicted_step_seconds());
}

// Keeps a step's plan, priced and with its lower bound set (AddToSums), in
// `run`; a strategy that may re-group keeps all its plans as phased ones.
void KeepPlan(StrategyPlan& planned, StrategyRun& run) {
  if (planned.IsPhased()) {
    run.phased_plans.push_back(std::move(planned.phased));
  } else if (run.strategy->phased()) {
    // A strategy that may re-group (dcp) kept one layout: kept as
    // one phase, so that its plans are all of one kind.
    run.phased_plans.push_back(AsOnePhase(std::move(planned.plan)));
  } else {
    run.plans.push_back(std::move(planned.plan));
  }
}

// The mean step time over `steps` steps of the strategy `name`; 0 if it
// was not run.
double MeanStepSeconds(const std::vector<StrategyRun>& runs,
                       absl::string_view name, double steps) {
  const StrategyRun* run = FindRun(runs, name);
  return run != nullptr ? run->sum_step_seconds / steps : 0;
}

// The stats of the reported runs over `steps` steps, in order; their
// step times and plans are moved out of `runs`.
std::vector<StrategyStats> ReportedStats(std::vector<StrategyRun>& runs,
                                         int steps) {
  const double steps_run = static_cast<double>(steps);
  const double bucket_mean_seconds = MeanStepSeconds(runs, kBucket, steps_run);
  const double best_static_mean_seconds =
      MeanStepSeconds(runs, kBestStatic, steps_run);
  std::vector<StrategyStats> reported;
  for (StrategyRun& run : runs) {
    if (!run.reported) continue;
    StrategyStats stats;
    stats.name = run.name;
    stats.steps = steps;
    stats.mean_step_seconds = run.sum_step_seconds / steps_run;
    stats.speedup_vs_bucket =
        run.name == kBucket ? 1.0
        : stats.mean_step_seconds > 0
            ? bucket_mean_seconds / stats.mean_step_seconds
            : 0;
    stats.mean_idle_fraction = run.sum_idle_fraction / steps_run;
    stats.max_memory_fraction = run.max_memory_fraction;
    stats.mean_gap_to_lower_bound = run.sum_gap_to_lower_bound / steps_run;
    stats.speedup_vs_best_static =
        best_static_mean_seconds > 0 && stats.mean_step_seconds > 0
            ? best_static_mean_seconds / stats.mean_step_seconds
            : 0;
    stats.setting = run.strategy->setting();
    stats.mean_phases = run.sum_phases / steps_run;
    stats.step_seconds = std::move(run.step_seconds);
    stats.plans = std::move(run.plans);
    stats.phased_plans = std::move(run.phased_plans);
    reported.push_back(std::move(stats));
  }
  return reported;
}

}  // namespace

absl::StatusOr<SimulationReport> Simulate(
    const CostModel& cost_model, BatchStream& batches,
    const SimulationOptions& options, const Clock& clock,
    std::function<void(int step, int steps)> progress) {
  DCP_RETURN_IF_ERROR(CheckOptions(options));
  DCP_ASSIGN_OR_RETURN(
      const std::vector<int> sp_sizes,
      LegalSpSizes(cost_model, options.planner_options.sp_sizes));
  DCP_ASSIGN_OR_RETURN(std::vector<StrategyRun> runs,
                       MakeRuns(options.strategies, cost_model,
                                StrategyOptionsFor(options, batches)));

  SimulationReport report;
  report.steps = options.steps;
  report.workload_description = DescribeWorkload(batches);
  double sum_lower_bound_seconds = 0;
  std::vector<double> dcp_latencies_ms;
  const double budget_bytes = cost_model.MemoryBudgetBytes();
  // Strategies with a setting for the whole run (best-static, Megatron's
  // caps) are tuned over every batch: the batches are drawn first (memory
  // grows with the steps).
  const bool draw_first =
      std::any_of(runs.begin(), runs.end(), [](const StrategyRun& run) {
        return run.strategy->tuned_over_run();
      });
  std::vector<std::vector<int64_t>> drawn;
  if (draw_first) {
    for (int step = 0; step < options.steps; ++step) {
      drawn.push_back(DrawLengths(batches));
    }
  }
  DCP_RETURN_IF_ERROR(TuneOverRun(drawn, runs));

  // Each step: its lower bound, then every strategy's plan, priced.
  std::vector<int64_t> lengths_tokens;
  for (int step = 0; step < options.steps; ++step) {
    lengths_tokens = draw_first ? std::move(drawn[step]) : DrawLengths(batches);
    absl::StatusOr<double> lower_bound =
        StepTimeLowerBound(cost_model, sp_sizes, lengths_tokens);
    if (!lower_bound.ok()) return WithStep(step, lower_bound.status());
    sum_lower_bound_seconds += *lower_bound;
    report.lower_bound_step_seconds.push_back(*lower_bound);
    if (options.keep_plans) report.batch_lengths.push_back(lengths_tokens);
    for (StrategyRun& run : runs) {
      absl::StatusOr<StrategyPlan> planned =
          PlanBatch(lengths_tokens, clock, run, dcp_latencies_ms);
      if (!planned.ok()) return WithStep(step, planned.status());
      AddToSums(*lower_bound, budget_bytes, *planned, run);
      if (options.keep_plans) {
        KeepPlan(*planned, run);
      }
    }
    if (progress) progress(step + 1, options.steps);
  }

  report.strategies = ReportedStats(runs, options.steps);
  report.lower_bound_mean_step_seconds =
      sum_lower_bound_seconds / static_cast<double>(options.steps);
  if (!dcp_latencies_ms.empty()) {
    report.plan_latency_p50_ms = Percentile(dcp_latencies_ms, 0.50);
    report.plan_latency_p99_ms = Percentile(dcp_latencies_ms, 0.99);
  }
  return report;
}

std::string SimulationReportToJson(const SimulationReport& report) {
  nlohmann::ordered_json strategies = nlohmann::ordered_json::array();
  for (const StrategyStats& stats : report.strategies) {
    nlohmann::ordered_json entry = {
        {"name", stats.name},
        {"mean_step_seconds", stats.mean_step_seconds},
        {"speedup_vs_bucket", stats.speedup_vs_bucket},
        {"mean_idle_fraction", stats.mean_idle_fraction},
        {"max_memory_fraction", stats.max_memory_fraction},
        {"mean_gap_to_lower_bound", stats.mean_gap_to_lower_bound},
        {"steps", stats.steps},
    };
    if (stats.speedup_vs_best_static > 0) {
      entry["speedup_vs_best_static"] = stats.speedup_vs_best_static;
    }
    if (!stats.setting.empty()) entry["setting"] = stats.setting;
    entry["mean_phases"] = stats.mean_phases;
    strategies.push_back(std::move(entry));
  }
  nlohmann::ordered_json json = {
      {"strategies", std::move(strategies)},
      {"lower_bound_mean_step_seconds", report.lower_bound_mean_step_seconds},
      {"plan_latency_ms",
       {{"p50", report.plan_latency_p50_ms},
        {"p99", report.plan_latency_p99_ms}}},
      {"steps", report.steps},
      {"workload", report.workload_description},
  };
  return json.dump();
}

std::string SimulationReportToTable(const SimulationReport& report) {
  const bool with_best_static =
      std::any_of(report.strategies.begin(), report.strategies.end(),
                  [](const StrategyStats& stats) {
                    return stats.speedup_vs_best_static > 0;
                  });
  std::vector<std::string> header = {"strategy", "step (s)"};
  if (with_best_static) header.push_back("vs best static");
  for (const char* column :
       {"vs bucket", "idle", "peak memory", "gap to LB", "phases"}) {
    header.push_back(column);
  }
  std::vector<std::vector<std::string>> rows = {header};
  for (const StrategyStats& stats : report.strategies) {
    std::vector<std::string> row = {
        stats.setting.empty()
            ? stats.name
            : absl::StrCat(stats.name, " (", stats.setting, ")"),
        absl::StrFormat("%.3f", stats.mean_step_seconds)};
    if (with_best_static) {
      row.push_back(absl::StrFormat("%.2fx", stats.speedup_vs_best_static));
    }
    for (std::string cell :
         {absl::StrFormat("%.2fx", stats.speedup_vs_bucket),
          absl::StrFormat("%.1f%%", 100 * stats.mean_idle_fraction),
          absl::StrFormat("%.1f%%", 100 * stats.max_memory_fraction),
          absl::StrFormat("%.1f%%", 100 * stats.mean_gap_to_lower_bound),
          absl::StrFormat("%.1f", stats.mean_phases)}) {
      row.push_back(std::move(cell));
    }
    rows.push_back(std::move(row));
  }
  std::vector<size_t> widths(header.size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  std::string table;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string line;
    for (size_t c = 0; c < rows[r].size(); ++c) {
      const std::string& cell = rows[r][c];
      const std::string padding(widths[c] - cell.size(), ' ');
      if (c > 0) line += "  ";
      // Names left-aligned, numbers right-aligned.
      line += c == 0 ? cell + padding : padding + cell;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    absl::StrAppend(&table, line, "\n");
    if (r == 0) {
      size_t total = 0;
      for (size_t w : widths) total += w;
      absl::StrAppend(&table, std::string(total + 2 * (widths.size() - 1), '-'),
                      "\n");
    }
  }
  absl::StrAppend(
      &table,
      absl::StrFormat("lower bound: %.3f s/step (mean over %d steps)\n",
                      report.lower_bound_mean_step_seconds, report.steps),
      absl::StrFormat("dcp plan latency: p50 %.2f ms, p99 %.2f ms\n",
                      report.plan_latency_p50_ms, report.plan_latency_p99_ms),
      "workload: ", report.workload_description, "\n");
  return table;
}

}  // namespace dcp
