// The load test's report: FormatLoadTestText and FormatLoadTestJson.

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "planner/service/load_test.h"

namespace dcp {
namespace {

using json = nlohmann::json;

/// The p99 GetPlan latency the load test is measured against.
constexpr double kGetPlanP99TargetMs = 50;

std::string WithCommas(int64_t value) {
  std::string digits = absl::StrCat(value < 0 ? -value : value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) {
    digits.insert(static_cast<size_t>(i), ",");
  }
  return value < 0 ? absl::StrCat("-", digits) : digits;
}

std::string BatchDescription(const LoadTestResult& result) {
  return result.global_batch_samples > 0
             ? absl::StrCat(WithCommas(result.global_batch_samples),
                            " samples per global batch")
             : absl::StrCat(WithCommas(result.global_batch_tokens),
                            " tokens per global batch");
}

const RpcLatency* FindRpc(const LoadTestResult& result,
                          absl::string_view name) {
  for (const RpcLatency& rpc : result.rpcs) {
    if (rpc.name == name) return &rpc;
  }
  return nullptr;
}

}  // namespace

std::string FormatLoadTestText(const LoadTestResult& result) {
  const LoadTestOptions& options = result.options;
  std::string text;
  int64_t tokens = 0;
  for (const LoadTestStep& step : result.steps) tokens += step.tokens;
  const double mean_tokens =
      result.steps.empty() ? 0
                           : static_cast<double>(tokens) / result.steps.size();
  absl::StrAppendFormat(
      &text,
      "world: %d workers x %d ranks = %s GPUs (%d nodes x %d GPUs), model "
      "%s\n",
      options.workers, options.ranks_per_worker, WithCommas(result.world_size),
      result.num_nodes, result.gpus_per_node, options.model);
  absl::StrAppendFormat(
      &text,
      "batch: %s, workload %s, seed %d (mean %s tokens per batch, %s per "
      "GPU)\n",
      BatchDescription(result), options.workload, options.seed,
      WithCommas(static_cast<int64_t>(mean_tokens)),
      WithCommas(static_cast<int64_t>(mean_tokens / result.world_size)));
  absl::StrAppendFormat(
      &text,
      "client: %d gRPC connections (%d TCP connections seen), %d threads, "
      "batches submitted ahead: %s, GetPlan %s, responses decoded %s, "
      "train %.3g s per step; server: %d call threads, %d planning "
      "threads\n",
      options.connections, result.tcp_connections, options.threads,
      options.ahead ? "yes" : "no",
      options.get_plan_with_batch ? "with the batch" : "by step + fingerprint",
      options.decode_every_plan ? "every one"
                                : "once per thread per distinct response",
      options.train_seconds, options.server_call_threads,
      options.planning_threads);
  absl::StrAppendFormat(&text, "host: %d CPUs, load average %.2f at start\n",
                        result.host_cpus, result.load_average_at_start);
  absl::StrAppendFormat(
      &text, "plans computed: %d for %d steps%s\n", result.plans_computed,
      options.steps,
      result.plans_total_metric >= 0
          ? absl::StrCat(" (dcp_plans_total ", result.plans_total_metric, ")")
          : std::string());
  if (options.profile_samples > 0) {
    absl::StrAppendFormat(
        &text, "profiles: %d workers x %d samples, fitted %d times\n",
        options.workers, options.profile_samples, result.profile_fits);
  }
  if (!result.steps.empty()) {
    absl::StrAppendFormat(
        &text, "GetPlan message sizes: request %.1f KiB, response %.1f KiB\n",
        result.steps.front().get_plan_request_bytes / 1024.0,
        result.steps.front().get_plan_response_bytes / 1024.0);
  }

  absl::StrAppend(&text,
                  "\nstep  samples   tokens       predicted_s  plan_ms  "
                  "ready  first_GetPlan_ms  all_fetched_ms  reports_ms  "
                  "hits  waited\n");
  for (const LoadTestStep& step : result.steps) {
    absl::StrAppendFormat(
        &text,
        "%-5d %-9s %-12s %-12.3f %-8s %-6s %-17.1f %-15.1f %-11.1f %-5d %d\n",
        step.step, WithCommas(step.samples), WithCommas(step.tokens),
        step.predicted_step_seconds,
        step.plan_ms >= 0 ? absl::StrFormat("%.1f", step.plan_ms) : "-",
        step.planned_before_fetch ? "yes" : "no", step.first_get_plan_ms,
        step.fetch_all_ms, step.report_all_ms, step.cache_hits,
        step.waited_for_planning);
  }

  absl::StrAppendFormat(&text, "\n%-32s %8s %8s %10s %9s %9s %9s %9s\n", "rpc",
                        "calls", "failed", "calls/s", "mean_ms", "p50_ms",
                        "p99_ms", "max_ms");
  for (const RpcLatency& rpc : result.rpcs) {
    absl::StrAppendFormat(&text, "%-32s %8d %8d %10s %9.2f %9.2f %9.2f %9.2f\n",
                          rpc.name, rpc.calls, rpc.failures,
                          rpc.calls_per_second > 0
                              ? absl::StrFormat("%.0f", rpc.calls_per_second)
                              : "-",
                          rpc.mean_ms, rpc.p50_ms, rpc.p99_ms, rpc.max_ms);
  }
  absl::StrAppendFormat(
      &text,
      "(ReportStepStats (per worker): the %d per-rank calls of one worker, "
      "in sequence)\n",
      options.ranks_per_worker);
  absl::StrAppendFormat(
      &text,
      "\nGetPlan server-side mean (dcp_rpc_latency_seconds): %s; process CPU "
      "per GetPlan %.2f ms, of which client threads %.2f ms\n",
      result.server_get_plan_mean_ms >= 0
          ? absl::StrFormat("%.2f ms", result.server_get_plan_mean_ms)
          : "unavailable",
      result.cpu_ms_per_get_plan, result.client_cpu_ms_per_get_plan);
  if (const RpcLatency* get_plan = FindRpc(result, kGetPlan);
      get_plan != nullptr && get_plan->calls > 0) {
    absl::StrAppendFormat(
        &text,
        "target GetPlan p99 < %.0f ms (%d workers, %d client threads, "
        "responses decoded %s): %s (%.1f ms over all %d calls",
        kGetPlanP99TargetMs, options.workers, options.threads,
        options.decode_every_plan ? "every one" : "once per thread",
        get_plan->p99_ms < kGetPlanP99TargetMs ? "met" : "MISSED",
        get_plan->p99_ms, get_plan->calls);
    if (const RpcLatency* waited = FindRpc(result, kGetPlanWaited);
        waited != nullptr && waited->calls > 0) {
      absl::StrAppendFormat(&text,
                            ", of which %d waited for their step to be "
                            "planned",
                            waited->calls);
    }
    absl::StrAppend(&text, ")\n");
  }
  absl::StrAppendFormat(&text, "wall time: %.1f s, using %.2f of %d CPUs\n",
                        result.wall_seconds, result.cpus_used,
                        result.host_cpus);
  for (const std::string& problem : result.problems) {
    absl::StrAppend(&text, "problem: ", problem, "\n");
  }
  for (const std::string& error : result.errors) {
    absl::StrAppend(&text, "error: ", error, "\n");
  }
  absl::StrAppend(
      &text, "result: ",
      result.ok()
          ? "OK"
          : absl::StrCat("FAILED (", result.failed_calls, " calls failed, ",
                         result.problems.size(), " problems)"),
      "\n");
  return text;
}

std::string FormatLoadTestJson(const LoadTestResult& result) {
  const LoadTestOptions& options = result.options;
  json steps = json::array();
  for (const LoadTestStep& step : result.steps) {
    steps.push_back(
        {{"step", step.step},
         {"samples", step.samples},
         {"tokens", step.tokens},
         {"predicted_step_seconds", step.predicted_step_seconds},
         {"plan_ms", step.plan_ms},
         {"planned_before_fetch", step.planned_before_fetch},
         {"first_get_plan_ms", step.first_get_plan_ms},
         {"fetch_all_ms", step.fetch_all_ms},
         {"report_all_ms", step.report_all_ms},
         {"cache_hits", step.cache_hits},
         {"waited_for_planning", step.waited_for_planning},
         {"get_plan_request_bytes", step.get_plan_request_bytes},
         {"get_plan_response_bytes", step.get_plan_response_bytes}});
  }
  json rpcs = json::array();
  for (const RpcLatency& rpc : result.rpcs) {
    rpcs.push_back({{"name", rpc.name},
                    {"calls", rpc.calls},
                    {"failures", rpc.failures},
                    {"calls_per_second", rpc.calls_per_second},
                    {"mean_ms", rpc.mean_ms},
                    {"p50_ms", rpc.p50_ms},
                    {"p99_ms", rpc.p99_ms},
                    {"max_ms", rpc.max_ms}});
  }
  json doc = {{"ok", result.ok()},
              {"world",
               {{"workers", options.workers},
                {"ranks_per_worker", options.ranks_per_worker},
                {"nodes", result.num_nodes},
                {"gpus_per_node", result.gpus_per_node},
                {"world_size", result.world_size}}},
              {"model", options.model},
              {"workload", options.workload},
              {"global_batch_samples", result.global_batch_samples},
              {"global_batch_tokens", result.global_batch_tokens},
              {"steps", options.steps},
              {"seed", options.seed},
              {"connections", options.connections},
              {"tcp_connections", result.tcp_connections},
              {"threads", options.threads},
              {"ahead", options.ahead},
              {"get_plan_with_batch", options.get_plan_with_batch},
              {"decode_every_plan", options.decode_every_plan},
              {"profile_samples", options.profile_samples},
              {"profile_fits", result.profile_fits},
              {"train_seconds", options.train_seconds},
              {"server_call_threads", options.server_call_threads},
              {"planning_threads", options.planning_threads},
              {"plans_computed", result.plans_computed},
              {"plans_total_metric", result.plans_total_metric},
              {"server_get_plan_mean_ms", result.server_get_plan_mean_ms},
              {"cpu_ms_per_get_plan", result.cpu_ms_per_get_plan},
              {"client_cpu_ms_per_get_plan", result.client_cpu_ms_per_get_plan},
              {"per_step", steps},
              {"rpcs", rpcs},
              {"failed_calls", result.failed_calls},
              {"problems", result.problems},
              {"errors", result.errors},
              {"wall_seconds", result.wall_seconds},
              {"host_cpus", result.host_cpus},
              {"load_average_at_start", result.load_average_at_start},
              {"cpus_used", result.cpus_used}};
  return doc.dump(2) + "\n";
}

}  // namespace dcp
