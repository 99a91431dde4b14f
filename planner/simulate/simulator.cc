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
#include "planner/strategies/best_static.h"
#include "planner/search/lower_bound.h"
#include "planner/strategies/megatron_dyncp.h"
#include "planner/plan/phased_plan.h"
#include "planner/search/phased_planner.h"
#include "planner/plan/plan.h"
#include "planner/strategies/videosys_dcp.h"

namespace dcp {
namespace {

constexpr char kBucket[] = "bucket";
constexpr char kPacked[] = "packed";
constexpr char kBestStatic[] = "best-static";
constexpr char kMegatronDynCp[] = "megatron-dyncp";
constexpr char kVideoSysDcp[] = "videosys-dcp";
constexpr char kDcp[] = "dcp";
constexpr char kDcpFixedAccum[] = "dcp-fixed-accum";
constexpr char kDcpUniformRecompute[] = "dcp-uniform-recompute";
constexpr char kDcpPhased[] = "dcp-phased";

// One strategy being simulated and its running sums.
struct StrategyRun {
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

std::vector<std::string> SimulationStrategyNames() {
  return {kBucket,        kPacked,        kBestStatic,
          kMegatronDynCp, kVideoSysDcp,   kDcp,
          kDcpFixedAccum, kDcpUniformRecompute, kDcpPhased};
}

bool IsPhasedStrategy(absl::string_view strategy) {
  return strategy == kMegatronDynCp || strategy == kVideoSysDcp ||
         strategy == kDcpPhased;
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
  if (strategy == kBestStatic) {
    absl::StatusOr<StaticSetting> setting = FindBestStaticSetting(
        cost_model, planner_options.sp_sizes,
        {std::vector<int64_t>(lengths_tokens.begin(), lengths_tokens.end())},
        static_options);
    if (!setting.ok()) return setting.status();
    absl::StatusOr<Plan> plan =
        PlanStaticSetting(cost_model, *setting, lengths_tokens);
    if (plan.ok()) plan->strategy = kBestStatic;
    return plan;
  }
  if (IsPhasedStrategy(strategy)) {
    return absl::InvalidArgumentError(
        absl::StrCat(strategy,
                     " re-groups the ranks within a step: its schedule is a "
                     "phased plan (see Simulate), not one layout"));
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
  // best-static is one setting for the whole run, chosen over every batch:
  // the batches are drawn first (memory grows with the steps).
  // megatron-dyncp's cap is tuned over every batch the same way.
  const bool best_static_run = std::any_of(
      runs.begin(), runs.end(),
      [](const StrategyRun& run) { return run.name == kBestStatic; });
  const bool megatron_run = std::any_of(
      runs.begin(), runs.end(),
      [](const StrategyRun& run) { return run.name == kMegatronDynCp; });
  const bool draw_first = best_static_run || megatron_run;
  std::vector<std::vector<int64_t>> drawn;
  auto draw = [&batches]() {
    std::vector<int64_t> lengths;
    for (const Sample& sample : batches.Next()) {
      lengths.push_back(sample.length_tokens);
    }
    return lengths;
  };
  std::optional<StaticSetting> best_static;
  std::optional<MegatronDynCpSetting> megatron;
  if (draw_first) {
    for (int step = 0; step < options.steps; ++step) drawn.push_back(draw());
  }
  if (megatron_run) {
    absl::StatusOr<MegatronDynCpSetting> setting =
        TuneMegatronDynCp(cost_model, options.planner_options.sp_sizes, drawn,
                          options.megatron_least_recompute_per_micro_batch);
    if (!setting.ok()) return setting.status();
    megatron = *setting;
  }
  if (best_static_run) {
    absl::StatusOr<StaticSetting> setting = FindBestStaticSetting(
        cost_model, options.planner_options.sp_sizes, drawn, static_options);
    if (!setting.ok()) {
      return absl::Status(
          setting.status().code(),
          absl::StrCat(kBestStatic, ": ", setting.status().message()));
    }
    best_static = *setting;
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
      if (IsPhasedStrategy(run.name)) {
        absl::StatusOr<PhasedPlan> phased;
        if (run.name == kMegatronDynCp) {
          phased = PlanMegatronDynCp(cost_model,
                                     options.planner_options.sp_sizes,
                                     lengths_tokens, *megatron);
        } else if (run.name == kVideoSysDcp) {
          phased = PlanVideoSysDcp(cost_model, options.planner_options.sp_sizes,
                                   lengths_tokens);
        } else {
          // dcp's own re-grouping search, over the planner `dcp` runs.
          PhasedPlannerOptions phased_options;
          phased_options.planner_options = options.planner_options;
          phased_options.planner_options.strategy_name = kDcpPhased;
          phased_options.planner_options.static_options = static_options;
          phased = PlanPhasedBatch(cost_model, lengths_tokens, phased_options);
        }
        if (!phased.ok()) {
          return WithStep(
              step, absl::Status(phased.status().code(),
                                 absl::StrCat(run.name, ": ",
                                              phased.status().message())));
        }
        PredictPhasedPlan(cost_model, lengths_tokens, *phased);
        phased->lower_bound_seconds = *lower_bound;
        run.sum_step_seconds += phased->predicted_step_seconds;
        run.sum_idle_fraction += MeanIdleFraction(*phased);
        run.max_memory_fraction = std::max(
            run.max_memory_fraction, MaxPeakBytes(*phased) / budget_bytes);
        run.sum_gap_to_lower_bound += phased->GapToLowerBound();
        run.sum_phases += phased->phases.size();
        run.step_seconds.push_back(phased->predicted_step_seconds);
        if (options.keep_plans) run.phased_plans.push_back(*std::move(phased));
        continue;
      }
      const bool timed = run.name == kDcp;
      const absl::Time start = timed ? clock.Now() : absl::InfinitePast();
      absl::StatusOr<Plan> plan =
          run.name == kBestStatic
              ? PlanStaticSetting(cost_model, *best_static, lengths_tokens)
              : PlanWithStrategy(cost_model, run.name, lengths_tokens,
                                 static_options, options.planner_options);
      if (plan.ok() && run.name == kBestStatic) plan->strategy = kBestStatic;
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
      run.sum_phases += 1;
      run.step_seconds.push_back(plan->predicted_step_seconds);
      if (options.keep_plans) run.plans.push_back(*std::move(plan));
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
    if (run.name == kBestStatic) stats.setting = best_static->Describe();
    if (run.name == kMegatronDynCp) stats.setting = megatron->Describe();
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
