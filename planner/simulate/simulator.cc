#include "planner/simulate/simulator.h"

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
  /// Every step's plan, with SimulationOptions::keep_plans.
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

}  // namespace

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
                     absl::StrJoin(StrategyNames(), ", ")));
  }
  absl::StatusOr<std::vector<int>> sp_sizes =
      LegalSpSizes(cost_model, options.planner_options.sp_sizes);
  if (!sp_sizes.ok()) return sp_sizes.status();

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
  // bucket is the speedup baseline: planned always, reported if asked.
  std::vector<StrategyRun> runs;
  auto add_run = [&](const std::string& name,
                     bool reported) -> absl::Status {
    absl::StatusOr<std::unique_ptr<Strategy>> strategy =
        MakeStrategy(name, cost_model, strategy_options);
    if (!strategy.ok()) return strategy.status();
    StrategyRun run;
    run.strategy = *std::move(strategy);
    run.name = name;
    run.reported = reported;
    runs.push_back(std::move(run));
    return absl::OkStatus();
  };
  for (const std::string& name : options.strategies) {
    for (const StrategyRun& run : runs) {
      if (run.name == name) {
        return absl::InvalidArgumentError(absl::StrCat(
            "strategy '", name, "' is listed twice; list each once"));
      }
    }
    if (absl::Status added = add_run(name, true); !added.ok()) return added;
  }
  size_t bucket_run = 0;
  while (bucket_run < runs.size() && runs[bucket_run].name != kBucket) {
    ++bucket_run;
  }
  if (bucket_run == runs.size()) {
    if (absl::Status added = add_run(kBucket, false); !added.ok()) {
      return added;
    }
  }

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
  auto draw = [&batches]() {
    std::vector<int64_t> lengths;
    for (const Sample& sample : batches.Next()) {
      lengths.push_back(sample.length_tokens);
    }
    return lengths;
  };
  if (draw_first) {
    for (int step = 0; step < options.steps; ++step) drawn.push_back(draw());
  }
  for (StrategyRun& run : runs) {
    if (!run.strategy->tuned_over_run()) continue;
    if (absl::Status tuned = run.strategy->Tune(drawn); !tuned.ok()) {
      return tuned;
    }
  }
  std::vector<int64_t> lengths_tokens;
  for (int step = 0; step < options.steps; ++step) {
    lengths_tokens = draw_first ? std::move(drawn[step]) : draw();
    absl::StatusOr<double> lower_bound =
        StepTimeLowerBound(cost_model, *sp_sizes, lengths_tokens);
    if (!lower_bound.ok()) return WithStep(step, lower_bound.status());
    sum_lower_bound_seconds += *lower_bound;
    report.lower_bound_step_seconds.push_back(*lower_bound);
    if (options.keep_plans) report.batch_lengths.push_back(lengths_tokens);

    for (StrategyRun& run : runs) {
      const bool timed = run.name == kDcp;
      const absl::Time start = timed ? clock.Now() : absl::InfinitePast();
      absl::StatusOr<StrategyPlan> planned =
          run.strategy->PlanBatch(lengths_tokens);
      if (timed) {
        dcp_latencies_ms.push_back(
            absl::ToDoubleMilliseconds(clock.Now() - start));
      }
      if (!planned.ok()) {
        return WithStep(
            step, absl::Status(planned.status().code(),
                               absl::StrCat(run.name, ": ",
                                            planned.status().message())));
      }
      // The same sums for a plan of one layout and one of phases.
      auto add = [&](auto& plan, size_t phases) {
        plan.lower_bound_seconds = *lower_bound;
        run.sum_idle_fraction += MeanIdleFraction(plan);
        run.max_memory_fraction = std::max(run.max_memory_fraction,
                                           MaxPeakBytes(plan) / budget_bytes);
        run.sum_gap_to_lower_bound += plan.GapToLowerBound();
        run.sum_phases += phases;
      };
      if (planned->IsPhased()) {
        add(planned->phased, planned->phased.phases.size());
      } else {
        add(planned->plan, 1);
      }
      run.sum_step_seconds += planned->predicted_step_seconds();
      run.step_seconds.push_back(planned->predicted_step_seconds());
      if (options.keep_plans) {
        if (planned->IsPhased()) {
          run.phased_plans.push_back(std::move(planned->phased));
        } else if (run.strategy->phased()) {
          // A strategy that may re-group (dcp) kept one layout: kept as
          // one phase, so that its plans are all of one kind.
          PhasedPlan one_phase;
          one_phase.strategy = planned->plan.strategy;
          one_phase.phases.push_back(std::move(planned->plan));
          PredictPhasedPlan(cost_model, lengths_tokens, one_phase);
          one_phase.lower_bound_seconds = *lower_bound;
          run.phased_plans.push_back(std::move(one_phase));
        } else {
          run.plans.push_back(std::move(planned->plan));
        }
      }
    }
    if (progress) progress(step + 1, options.steps);
  }

  const double steps = static_cast<double>(options.steps);
  const double bucket_mean_seconds = runs[bucket_run].sum_step_seconds / steps;
  double best_static_mean_seconds = 0;
  for (const StrategyRun& run : runs) {
    if (run.name == kBestStatic)
      best_static_mean_seconds = run.sum_step_seconds / steps;
  }
  for (StrategyRun& run : runs) {
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
    stats.speedup_vs_best_static =
        best_static_mean_seconds > 0 && stats.mean_step_seconds > 0
            ? best_static_mean_seconds / stats.mean_step_seconds
            : 0;
    stats.setting = run.strategy->setting();
    stats.mean_phases = run.sum_phases / steps;
    stats.step_seconds = std::move(run.step_seconds);
    stats.plans = std::move(run.plans);
    stats.phased_plans = std::move(run.phased_plans);
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
