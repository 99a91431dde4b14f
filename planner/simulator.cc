#include "planner/simulator.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/percentile.h"
#include "nlohmann/json.hpp"
#include "planner/batch_check.h"
#include "planner/lower_bound.h"
#include "planner/plan.h"

namespace dcp {
namespace {

constexpr char kBucket[] = "bucket";
constexpr char kPacked[] = "packed";
constexpr char kDcp[] = "dcp";
constexpr char kDcpFixedAccum[] = "dcp-fixed-accum";
constexpr char kDcpUniformRecompute[] = "dcp-uniform-recompute";

// One strategy being simulated and its running sums.
struct StrategyRun {
  std::string name;
  bool reported = true;
  double sum_step_seconds = 0;
  double sum_idle_fraction = 0;
  double max_memory_fraction = 0;
  double sum_gap_to_lower_bound = 0;
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

}  // namespace

std::vector<std::string> SimulationStrategyNames() {
  return {kBucket, kPacked, kDcp, kDcpFixedAccum, kDcpUniformRecompute};
}

absl::StatusOr<Plan> PlanWithStrategy(const CostModel& cost_model,
                                      absl::string_view strategy,
                                      absl::Span<const int64_t> lengths_tokens,
                                      const StaticOptions& static_options,
                                      const PlannerOptions& planner_options) {
  if (strategy == kBucket) {
    return PlanBucket(cost_model, lengths_tokens, static_options);
  }
  if (strategy == kPacked) {
    return PlanPacked(cost_model, lengths_tokens, static_options);
  }
  if (strategy != kDcp && strategy != kDcpFixedAccum &&
      strategy != kDcpUniformRecompute) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown strategy '", strategy, "'; valid strategies: ",
                     absl::StrJoin(SimulationStrategyNames(), ", ")));
  }
  PlannerOptions options = planner_options;
  options.strategy_name = std::string(strategy);
  // dcp weighs the same static configurations it is compared against.
  options.static_options = static_options;
  if (strategy == kDcpFixedAccum) options.variable_accumulation = false;
  if (strategy == kDcpUniformRecompute) options.pyramid_recompute = false;
  return Planner(cost_model, std::move(options)).PlanBatch(lengths_tokens);
}

absl::StatusOr<SimulationReport> Simulate(
    const CostModel& cost_model, BatchStream& batches,
    const SimulationOptions& options, const Clock& clock,
    std::function<void(int step, int steps)> progress) {
  if (options.steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps = ", options.steps, "; simulate at least 1 step"));
  }
  if (options.strategies.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no strategies to simulate; choose some of ",
                     absl::StrJoin(SimulationStrategyNames(), ", ")));
  }
  absl::StatusOr<std::vector<int>> sp_sizes =
      LegalSpSizes(cost_model, options.planner_options.sp_sizes);
  if (!sp_sizes.ok()) return sp_sizes.status();

  StaticOptions static_options = options.static_options;
  if (static_options.workload_max_length_tokens == 0) {
    static_options.workload_max_length_tokens =
        batches.source().MaxLengthTokens();
  }

  // bucket is the speedup baseline: planned always, reported if asked.
  std::vector<StrategyRun> runs;
  const std::vector<std::string> known = SimulationStrategyNames();
  for (const std::string& name : options.strategies) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown strategy '", name,
                       "'; valid strategies: ", absl::StrJoin(known, ", ")));
    }
    for (const StrategyRun& run : runs) {
      if (run.name == name) {
        return absl::InvalidArgumentError(absl::StrCat(
            "strategy '", name, "' is listed twice; list each once"));
      }
    }
    StrategyRun run;
    run.name = name;
    runs.push_back(std::move(run));
  }
  size_t bucket_run = 0;
  while (bucket_run < runs.size() && runs[bucket_run].name != kBucket) {
    ++bucket_run;
  }
  if (bucket_run == runs.size()) {
    StrategyRun run;
    run.name = kBucket;
    run.reported = false;
    runs.push_back(std::move(run));
  }

  SimulationReport report;
  report.steps = options.steps;
  report.workload_description = DescribeWorkload(batches);
  double sum_lower_bound_seconds = 0;
  std::vector<double> dcp_latencies_ms;
  const double budget_bytes = cost_model.MemoryBudgetBytes();
  std::vector<int64_t> lengths_tokens;
  for (int step = 0; step < options.steps; ++step) {
    const std::vector<Sample> batch = batches.Next();
    lengths_tokens.clear();
    for (const Sample& sample : batch) {
      lengths_tokens.push_back(sample.length_tokens);
    }
    absl::StatusOr<double> lower_bound =
        StepTimeLowerBound(cost_model, *sp_sizes, lengths_tokens);
    if (!lower_bound.ok()) return WithStep(step, lower_bound.status());
    sum_lower_bound_seconds += *lower_bound;

    for (StrategyRun& run : runs) {
      const bool timed = run.name == kDcp;
      const absl::Time start = timed ? clock.Now() : absl::InfinitePast();
      absl::StatusOr<Plan> plan =
          PlanWithStrategy(cost_model, run.name, lengths_tokens, static_options,
                           options.planner_options);
      if (timed) {
        dcp_latencies_ms.push_back(
            absl::ToDoubleMilliseconds(clock.Now() - start));
      }
      if (!plan.ok()) {
        return WithStep(
            step, absl::Status(
                      plan.status().code(),
                      absl::StrCat(run.name, ": ", plan.status().message())));
      }
      PredictPlan(cost_model, lengths_tokens, *plan);
      plan->lower_bound_seconds = *lower_bound;
      run.sum_step_seconds += plan->predicted_step_seconds;
      run.sum_idle_fraction += MeanIdleFraction(*plan);
      run.max_memory_fraction =
          std::max(run.max_memory_fraction, MaxPeakBytes(*plan) / budget_bytes);
      run.sum_gap_to_lower_bound += plan->GapToLowerBound();
    }
    if (progress) progress(step + 1, options.steps);
  }

  const double steps = static_cast<double>(options.steps);
  const double bucket_mean_seconds = runs[bucket_run].sum_step_seconds / steps;
  for (const StrategyRun& run : runs) {
    if (!run.reported) continue;
    StrategyStats stats;
    stats.name = run.name;
    stats.steps = options.steps;
    stats.mean_step_seconds = run.sum_step_seconds / steps;
    stats.speedup_vs_bucket =
        run.name == kBucket ? 1.0
        : stats.mean_step_seconds > 0
            ? bucket_mean_seconds / stats.mean_step_seconds
            : 0;
    stats.mean_idle_fraction = run.sum_idle_fraction / steps;
    stats.max_memory_fraction = run.max_memory_fraction;
    stats.mean_gap_to_lower_bound = run.sum_gap_to_lower_bound / steps;
    report.strategies.push_back(std::move(stats));
  }
  report.lower_bound_mean_step_seconds = sum_lower_bound_seconds / steps;
  if (!dcp_latencies_ms.empty()) {
    report.plan_latency_p50_ms = Percentile(dcp_latencies_ms, 0.50);
    report.plan_latency_p99_ms = Percentile(dcp_latencies_ms, 0.99);
  }
  return report;
}

std::string SimulationReportToJson(const SimulationReport& report) {
  nlohmann::ordered_json strategies = nlohmann::ordered_json::array();
  for (const StrategyStats& stats : report.strategies) {
    strategies.push_back({
        {"name", stats.name},
        {"mean_step_seconds", stats.mean_step_seconds},
        {"speedup_vs_bucket", stats.speedup_vs_bucket},
        {"mean_idle_fraction", stats.mean_idle_fraction},
        {"max_memory_fraction", stats.max_memory_fraction},
        {"mean_gap_to_lower_bound", stats.mean_gap_to_lower_bound},
        {"steps", stats.steps},
    });
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
  const std::vector<std::string> header = {
      "strategy", "step (s)", "vs bucket", "idle", "peak memory", "gap to LB"};
  std::vector<std::vector<std::string>> rows = {header};
  for (const StrategyStats& stats : report.strategies) {
    rows.push_back({
        stats.name,
        absl::StrFormat("%.3f", stats.mean_step_seconds),
        absl::StrFormat("%.2fx", stats.speedup_vs_bucket),
        absl::StrFormat("%.1f%%", 100 * stats.mean_idle_fraction),
        absl::StrFormat("%.1f%%", 100 * stats.max_memory_fraction),
        absl::StrFormat("%.1f%%", 100 * stats.mean_gap_to_lower_bound),
    });
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
