#ifndef DCP_PLANNER_SERVICE_LOAD_TEST_H_
#define DCP_PLANNER_SERVICE_LOAD_TEST_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/main_prologue.h"

namespace dcp {

/// What `planner_load_test` runs: a real PlannerServer in this process on
/// 127.0.0.1:0 and `workers` simulated workers calling it over gRPC through
/// GrpcPlannerClient.
struct LoadTestOptions {
  /// Simulated workers; each is one node (nodes = workers).
  int workers = 512;
  /// Ranks of each worker (= GPUs per node). 512 x 8: a 4,096-GPU world.
  int ranks_per_worker = 8;
  /// Training steps; each step is planned once and fetched by every worker.
  int steps = 20;
  /// Model preset or ModelSpec JSON file (see LoadModelSpec).
  std::string model = "llama3-8b";
  /// Sequence-length workload (see ParseWorkloadSpec).
  std::string workload = "longtail";
  /// Global batch: exactly one of these > 0, or both 0 for the default of
  /// kDefaultSamplesPerGpu samples per GPU (16,384 samples at 4,096 GPUs).
  int64_t global_batch_tokens = 0;
  int64_t global_batch_samples = 0;
  /// Seeds the batch stream and the synthetic measurement noise.
  uint64_t seed = 1;
  /// gRPC channels (each its own TCP connection) the workers share; worker
  /// i uses channel i % connections.
  int connections = 16;
  /// Client threads: the most calls in flight at once.
  int threads = 64;
  /// Submit step k+1's batch (SubmitBatches) when step k starts, so that
  /// the planner plans it while step k is served.
  bool ahead = true;
  /// Every GetPlan carries the step's whole batch (the old protocol).
  /// Otherwise workers ask by step and batch fingerprint: the batch is
  /// submitted by worker 0 (SubmitBatches with `ahead`, else its GetPlan
  /// carries it and the others ask once it has answered).
  bool get_plan_with_batch = false;
  /// Decode every GetPlan response. Otherwise each client thread decodes a
  /// response only when it is not byte-equal to the last one it decoded:
  /// every response still crosses the wire whole and is compared, but the
  /// 512 workers' decoding, which a real job spreads over their own
  /// machines, does not all land on the planner's cores.
  bool decode_every_plan = false;
  /// After registering, every worker submits a profile of this many
  /// synthetic samples at once (0: no profiles).
  int profile_samples = 0;
  /// Reported step time = predicted x (1 + noise x u), u uniform in [-1, 1)
  /// drawn from (seed, step, rank).
  double noise = 0.05;
  /// Wall seconds each step "trains" between fetching the plan and
  /// reporting (0: report at once).
  double train_seconds = 0;
  /// The server's handler call threads (PlannerServer::Options).
  int server_call_threads = 16;
  /// The handler's background planning threads.
  int planning_threads = 1;
  /// While step 0's GetPlans are under way, one more client thread
  /// re-registers workers (RegisterWorker is idempotent) this many times, one
  /// call after another; the calls sent before step 0's plan was made form
  /// the row kRegisterWhilePlanning. With --ahead=false and
  /// --get-plan-with-batch every step-0 GetPlan waits for that plan, so the
  /// row shows whether registration waits behind them. 0: no such calls.
  int register_while_planning = 0;
};

/// Samples per GPU in the default global batch.
inline constexpr int64_t kDefaultSamplesPerGpu = 4;

/// Latencies of one kind of call, measured client-side around each call.
/// RpcLatency::name of each row.
inline constexpr char kRegisterWorker[] = "RegisterWorker";
inline constexpr char kListWorkers[] = "ListWorkers";
inline constexpr char kSubmitBatches[] = "SubmitBatches";
inline constexpr char kSubmitProfile[] = "SubmitProfile";
inline constexpr char kGetPlan[] = "GetPlan";
inline constexpr char kGetPlanHit[] = "GetPlan (cache hit)";
inline constexpr char kGetPlanWaited[] = "GetPlan (waited for planning)";
inline constexpr char kRegisterWhilePlanning[] =
    "RegisterWorker (while GetPlans wait)";
inline constexpr char kReportStepStats[] = "ReportStepStats (per rank)";
inline constexpr char kReportPerWorker[] = "ReportStepStats (per worker)";

struct RpcLatency {
  /// "GetPlan", "GetPlan (cache hit)", "ReportStepStats (per worker)", ...
  std::string name;
  int64_t calls = 0;
  int64_t failures = 0;
  /// Calls over the wall time of the phases they ran in; 0 for subsets of
  /// another row (e.g. cache hits), where it would mislead.
  double calls_per_second = 0;
  double mean_ms = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
};

/// One training step as the load test saw it.
struct LoadTestStep {
  int64_t step = 0;
  int64_t samples = 0;
  int64_t tokens = 0;
  /// The handler's planning time for the step (its log line); -1 when the
  /// step was not planned exactly once.
  double plan_ms = -1;
  /// The plan was finished before the step's first GetPlan was sent.
  bool planned_before_fetch = false;
  /// Latency of the step's first GetPlan (includes planning unless the
  /// plan was ready).
  double first_get_plan_ms = 0;
  /// Wall time from the first GetPlan sent to the last answered: when every
  /// worker has its plan.
  double fetch_all_ms = 0;
  /// Wall time of the step's ReportStepStats calls (every rank).
  double report_all_ms = 0;
  /// GetPlan calls that found the plan ready / waited for planning.
  int64_t cache_hits = 0;
  int64_t waited_for_planning = 0;
  double predicted_step_seconds = 0;
  /// Serialized sizes of one GetPlan request and response.
  int64_t get_plan_request_bytes = 0;
  int64_t get_plan_response_bytes = 0;
};

struct LoadTestResult {
  LoadTestOptions options;
  int num_nodes = 0;
  int gpus_per_node = 0;
  int world_size = 0;
  /// Samples per global batch (the default or the flag); 0 with a token
  /// budget.
  int64_t global_batch_samples = 0;
  int64_t global_batch_tokens = 0;
  /// TCP connections to the planner's port seen in /proc/self/net/tcp after
  /// the workers registered; -1 if unreadable.
  int tcp_connections = -1;
  /// PlannerMetrics::PlanComputed calls: must equal the number of steps.
  int64_t plans_computed = 0;
  /// dcp_plans_total scraped from the server's /metrics; -1 if unreadable.
  int64_t plans_total_metric = -1;
  /// Profile fits the planner ran for the workers' SubmitProfile calls.
  int64_t profile_fits = 0;
  /// Server-side mean GetPlan latency (dcp_rpc_latency_seconds sum/count),
  /// receipt to answer; -1 if unreadable.
  double server_get_plan_mean_ms = -1;
  /// Process CPU seconds (client and server together) per GetPlan call,
  /// over the GetPlan phases, and the share spent on client threads.
  double cpu_ms_per_get_plan = 0;
  double client_cpu_ms_per_get_plan = 0;
  std::vector<LoadTestStep> steps;
  std::vector<RpcLatency> rpcs;
  int64_t failed_calls = 0;
  /// Other failures: a plan computed more or less than once per step,
  /// workers seeing different plans, ranks without a group.
  std::vector<std::string> problems;
  /// The first few failed calls' errors.
  std::vector<std::string> errors;
  double wall_seconds = 0;
  /// The machine: CPUs, and the 1-minute load average when the test started
  /// (-1 if unreadable); other work on the CPUs skews every latency.
  int host_cpus = 0;
  double load_average_at_start = -1;
  /// This process' CPU seconds over the run divided by its wall time: how
  /// many of the CPUs the test (client and server together) got.
  double cpus_used = 0;

  /// No call failed and every step was planned exactly once.
  bool ok() const { return failed_calls == 0 && problems.empty(); }
};

/// Runs the load test. Errors only for what keeps it from starting (bad
/// options, an unknown model or workload, a server that cannot start);
/// failed calls are counted in the result. `log` (may be empty) gets the
/// planner's log lines.
absl::StatusOr<LoadTestResult> RunLoadTest(
    const LoadTestOptions& options,
    const std::function<void(const std::string&)>& log = nullptr);

/// The result as a human-readable report (ends with a newline).
std::string FormatLoadTestText(const LoadTestResult& result);
/// The result as one JSON object (ends with a newline).
std::string FormatLoadTestJson(const LoadTestResult& result);

/// Exit codes of `planner_load_test` (common/main_prologue's): kExitOk,
/// kExitFailure when a call failed or a step was not planned exactly once,
/// kExitUsageError.

/// The `planner_load_test` command (see --help). `argv[0]` is the program
/// name.
int RunLoadTestMain(int argc, char** argv);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_LOAD_TEST_H_
