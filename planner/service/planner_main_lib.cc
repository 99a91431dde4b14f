#include "planner/service/planner_main_lib.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/command_line.h"
#include "common/host_port.h"
#include "common/main_prologue.h"
#include "common/malloc_control.h"
#include "common/process_support.h"
#include "common/status_macros.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/model_cluster_flags.h"
#include "cost_model/model_spec.h"
#include "planner/service/byte_quantity.h"
#include "planner/service/planner_handler.h"
#include "planner/service/planner_server.h"
#include "planner/service/port_file.h"
#include "planner/service/request_validation.h"
#include "planner/service/step_plan.h"

namespace dcp {
namespace {

constexpr char kTokenEnvironmentVariable[] = "DCP_PLANNER_TOKEN";
/// The smallest --memory-budget other than 0 (no bound): the planner's own
/// resident set before any client calls is tens of MiB.
constexpr int64_t kMinMemoryBudgetBytes = int64_t{64} << 20;

/// malloc arenas the planner's threads share (glibc's default is 8 per
/// core, each keeping what its threads freed).
constexpr int kPlannerMallocArenas = 2;

// --model, --nodes, --gpus-per-node, --memory-fraction and --cluster.
const ModelClusterFlags& ModelCluster() {
  static const auto* const flags = new ModelClusterFlags(
      {/*default_model=*/"tiny", /*default_nodes=*/"1",
       /*default_gpus_per_node=*/"8", /*default_memory_fraction=*/"0.8",
       /*gpus_flag=*/false, /*cluster_file_flag=*/true});
  return *flags;
}

constexpr FlagSpec kListenFlags[] = {
    {"listen", "HOST:PORT", "0.0.0.0:50051",
     "gRPC address (port 0 picks a free port)"},
    {"metrics-listen", "HOST:PORT", "0.0.0.0:9464",
     "Prometheus GET /metrics address; empty disables metrics"},
    {"port-file", "FILE", "",
     "once serving, write the ports to FILE (atomically): lines "
     "grpc_port=N and metrics_port=M (0: metrics disabled), for launchers "
     "that pass port 0"},
};

constexpr FlagSpec kServiceFlags[] = {
    {"state-dir", "DIR", "",
     "directory for state that survives a restart (registrations, fitted "
     "parameters, planned steps); empty keeps it in memory"},
    {"online-refit", nullptr, "false",
     "refit the compute model from the workers' measured step times"},
    {"refit-warmup-steps", "N", "0",
     "with --online-refit, leave the first N steps reported out of the "
     "refit (they pay one-time costs: allocations, first use of each "
     "shape; on the CPU main job 1 showed no clear gain over 0)"},
    {"micro-batch-refit", nullptr, "false",
     "with --online-refit, also refit the micro-batch model's rate scale "
     "and fixed costs (per micro-batch, layer pass and sequence) from the "
     "measured micro-batches when they explain them clearly better than "
     "one compute factor (experimental: on the CPU main job it has not "
     "yet lowered the error)"},
    {"phased-plans", nullptr, "true",
     "also try plans that re-group the ranks within a step (two phases "
     "with a world barrier between them) and serve one when predicted "
     "faster than the one-layout plan. Its gain is at most the one-layout "
     "plan's gap to the lower bound, so the search runs only for batches "
     "whose gap is at least --phased-min-gap, and skips the splits whose "
     "phases' lower bounds cannot win (p99 6 ms on a 2M-token batch on 32 "
     "GPUs, planner_benchmark). Under ZeRO-3 (workers declaring "
     "optimizer_sharding zero3) phases are tried even with "
     "--phased-plans=false"},
    {"phased-min-gap", "FRACTION", "0.03",
     "with --phased-plans: the one-layout plan's least gap to the lower "
     "bound (0.03: at least 3% above it) for which phases are tried; 0 "
     "tries them for every batch"},
    {"tls-cert", "FILE", "", "server certificate chain (PEM); enables TLS"},
    {"tls-key", "FILE", "", "server private key (PEM)"},
    {"tls-client-ca", "FILE", "",
     "CA of client certificates (PEM); enables mutual TLS"},
    {"token-file", "FILE", "",
     "file holding the bearer token clients must send (e.g. a mounted "
     "Kubernetes Secret); else $DCP_PLANNER_TOKEN; required when --listen "
     "is not a loopback address"},
    {"allow-unauthenticated", nullptr, "false",
     "serve beyond loopback without a token (anyone who can reach the "
     "port may register workers and submit batches)"},
    {"planning-threads", "N", "1",
     "threads planning submitted batches ahead, at most 64; 0 plans on "
     "demand only"},
    {"job-id", "ID", "",
     "the job this planner serves (set by the launcher, e.g. the Kubernetes "
     "Job's name): registrations of workers with another --job-id, or with "
     "none, are refused (PERMISSION_DENIED); empty accepts any job"},
    {"liveness-timeout", "DURATION", "60s",
     "a worker silent this long is reported LOST (e.g. 30s, 2m)"},
    {"drain-timeout", "DURATION", "10s",
     "on SIGTERM/SIGINT, how long calls in flight may take to finish; "
     "planning still running then is abandoned"},
    {"memory-budget", "BYTES", "1Gi",
     "memory the planner may use: set it a little under the pod's memory "
     "limit (e.g. 768Mi for 1Gi); batches waiting to be planned may hold a "
     "quarter of it, more are RESOURCE_EXHAUSTED. Kubernetes quantities "
     "(768Mi, 1.5Gi, 800M) or bytes, at least 64Mi; 0: no bound"},
    {"max-queued-planning", "DURATION", "10m",
     "predicted planning time that submitted batches may queue; more are "
     "RESOURCE_EXHAUSTED"},
};

const std::vector<FlagSpec>& Flags() {
  static const auto* const flags = new std::vector<FlagSpec>(
      ConcatFlagTables({kListenFlags, ModelCluster().specs(), kServiceFlags}));
  return *flags;
}

const ProgramSpec& Program() {
  static const auto* const program = new ProgramSpec{
      "dcp_planner",
      "dcp_planner: the DCP planner service. Workers register, submit "
      "profiles, fetch each step's plan and report step times over gRPC "
      "(dcp.v1.Planner, plus grpc.health.v1).",
      Flags(),
      "Prints \"dcp_planner listening on HOST:PORT, metrics on HOST:PORT\" "
      "once serving.\nSIGTERM or SIGINT drains calls in flight and exits "
      "0.\n"};
  return *program;
}

/// True for hosts that only this machine can reach: 127.0.0.0/8, ::1 and
/// localhost (an empty host is every interface).
bool IsLoopbackHost(absl::string_view host) {
  host = absl::StripPrefix(absl::StripSuffix(host, "]"), "[");
  return absl::StartsWith(host, "127.") || host == "::1" ||
         absl::EqualsIgnoreCase(host, "localhost");
}

absl::StatusOr<PlannerServer::Options> ServerOptions(const ParsedFlags& flags) {
  PlannerServer::Options options;
  options.listen_address = flags.String("listen");
  options.metrics_address = flags.String("metrics-listen");
  if (options.listen_address.empty()) {
    return absl::InvalidArgumentError(
        "--listen is empty; give HOST:PORT, e.g. 0.0.0.0:50051");
  }
  if (absl::StatusOr<std::pair<std::string, int>> listen =
          ParseListenAddress(options.listen_address);
      !listen.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen: ", listen.status().message()));
  }
  if (!options.metrics_address.empty()) {
    if (absl::StatusOr<std::pair<std::string, int>> metrics =
            ParseListenAddress(options.metrics_address);
        !metrics.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics-listen: ", metrics.status().message()));
    }
  }

  absl::StatusOr<ModelSpec> model = ModelCluster().Model(flags);
  if (!model.ok()) return model.status();
  absl::StatusOr<ClusterSpec> cluster = ModelCluster().Cluster(flags);
  if (!cluster.ok()) return cluster.status();
  options.handler.model = *std::move(model);
  options.handler.cluster = *cluster;
  options.handler.state_dir = flags.String("state-dir");
  absl::StatusOr<bool> online_refit = flags.Bool("online-refit");
  if (!online_refit.ok()) return online_refit.status();
  options.handler.online_refit = *online_refit;
  absl::StatusOr<int64_t> refit_warmup_steps =
      flags.Int("refit-warmup-steps", 0, 1000);
  if (!refit_warmup_steps.ok()) return refit_warmup_steps.status();
  options.handler.refit_warmup_steps = static_cast<int>(*refit_warmup_steps);
  absl::StatusOr<bool> micro_batch_refit = flags.Bool("micro-batch-refit");
  if (!micro_batch_refit.ok()) return micro_batch_refit.status();
  options.handler.micro_batch_refit = *micro_batch_refit;
  absl::StatusOr<bool> phased_plans = flags.Bool("phased-plans");
  if (!phased_plans.ok()) return phased_plans.status();
  absl::StatusOr<double> min_gap = flags.Double("phased-min-gap", 0, 1);
  if (!min_gap.ok()) return min_gap.status();
  PhasedPlanningOptions phased;
  phased.enabled = *phased_plans;
  phased.min_gap_to_try = *min_gap;
  options.handler.make_step_plan = StepPlanMaker(phased);
  absl::StatusOr<int> planning_threads =
      flags.Int32("planning-threads", 0, kMaxBackgroundPlanningThreads);
  if (!planning_threads.ok()) return planning_threads.status();
  options.handler.background_planning_threads = *planning_threads;
  options.handler.job_id = flags.String("job-id");
  if (!options.handler.job_id.empty()) {
    DCP_RETURN_IF_ERROR(ValidateIdentifier("--job-id", options.handler.job_id,
                                           "the launcher's job name"));
  }
  absl::StatusOr<absl::Duration> liveness = flags.Duration("liveness-timeout");
  if (!liveness.ok()) return liveness.status();
  options.handler.worker_liveness_timeout = *liveness;
  absl::StatusOr<int64_t> memory_budget =
      ParseByteQuantity("memory-budget", flags.String("memory-budget"));
  if (!memory_budget.ok()) return memory_budget.status();
  if (*memory_budget != 0 && *memory_budget < kMinMemoryBudgetBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory-budget=", flags.String("memory-budget"), " is ",
        *memory_budget, " bytes, below the planner's minimum of 64Mi (",
        kMinMemoryBudgetBytes,
        " bytes: the process itself, its gRPC threads and one step's plan "
        "need about that); give at least 64Mi, a little under the pod's "
        "memory limit, or 0 for no bound"));
  }
  options.handler.memory_budget_bytes = *memory_budget;
  absl::StatusOr<absl::Duration> queued_planning =
      flags.Duration("max-queued-planning");
  if (!queued_planning.ok()) return queued_planning.status();
  options.handler.max_queued_planning = *queued_planning;

  options.tls.cert_file = flags.String("tls-cert");
  options.tls.key_file = flags.String("tls-key");
  options.tls.client_ca_file = flags.String("tls-client-ca");
  if (options.tls.cert_file.empty() != options.tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together: give both or neither");
  }
  if (!options.tls.client_ca_file.empty() && options.tls.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)");
  }
  absl::StatusOr<std::string> token = LoadBearerToken(flags);
  if (!token.ok()) return token.status();
  options.bearer_token = *std::move(token);
  absl::StatusOr<bool> allow_unauthenticated =
      flags.Bool("allow-unauthenticated");
  if (!allow_unauthenticated.ok()) return allow_unauthenticated.status();
  if (options.bearer_token.empty() && !*allow_unauthenticated &&
      !IsLoopbackHost(ParseListenAddress(options.listen_address)->first)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen=", options.listen_address,
        " is reachable beyond this machine but no bearer token is set: give "
        "--token-file=FILE (or $",
        kTokenEnvironmentVariable,
        "), listen on 127.0.0.1, or pass --allow-unauthenticated"));
  }
  return options;
}

/// `address` (host:port) with its port replaced by `port`.
std::string WithPort(const std::string& address, int port) {
  const size_t colon = address.rfind(':');
  const std::string host =
      colon == std::string::npos ? address : address.substr(0, colon);
  return absl::StrCat(host, ":", port);
}

}  // namespace

int RunPlannerMain(int argc, char** argv) {
  // Before any thread starts: the call and planning threads share two
  // arenas rather than one each, which holds the planner's resident memory
  // to its --memory-budget under a flood (common/malloc_control.h).
  LimitMallocArenas(kPlannerMallocArenas);
  const MainStart start = StartMain(Program(), argc, argv);
  if (!start.flags.has_value()) return start.exit_code;
  const ParsedFlags& flags = *start.flags;
  absl::StatusOr<PlannerServer::Options> options = ServerOptions(flags);
  absl::StatusOr<absl::Duration> drain_timeout =
      flags.Duration("drain-timeout");
  if (options.ok() && !drain_timeout.ok()) options = drain_timeout.status();
  if (!options.ok()) {
    return PrintUsageError(std::cerr, Program().name,
                           options.status().message());
  }
  if (options->bearer_token.empty()) {
    LogLine(absl::StrCat("no bearer token (--token-file or $",
                         kTokenEnvironmentVariable, "): anyone who can reach ",
                         options->listen_address, " may call the planner"));
  }

  // Block the signals before the server starts its threads, so that they
  // inherit the mask and only sigwait() below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const std::string listen_address = options->listen_address;
  const std::string metrics_address = options->metrics_address;
  absl::StatusOr<std::unique_ptr<PlannerServer>> server =
      PlannerServer::Start(*std::move(options), RealClock::Get(), &LogLine);
  if (!server.ok()) {
    std::fprintf(stderr, "dcp_planner: %s\n",
                 server.status().ToString().c_str());
    return server.status().code() == absl::StatusCode::kInvalidArgument
               ? kExitUsageError
               : kExitFailure;
  }
  const std::string metrics_text =
      metrics_address.empty()
          ? std::string("metrics disabled")
          : absl::StrCat("metrics on ",
                         WithPort(metrics_address, (*server)->metrics_port()));
  if (const std::string port_file = flags.String("port-file");
      !port_file.empty()) {
    const PlannerPorts ports{
        (*server)->port(),
        metrics_address.empty() ? 0 : (*server)->metrics_port()};
    if (absl::Status status = WritePortFile(port_file, ports); !status.ok()) {
      std::fprintf(stderr, "dcp_planner: --port-file: %s\n",
                   std::string(status.message()).c_str());
      (*server)->Shutdown(absl::ZeroDuration());
      return kExitFailure;
    }
  }
  // Only a planner that started claims its state directory: a failed start
  // (say, the port file above) leaves a fresh one fresh, so the corrected
  // command line is not refused as another job.
  if (absl::Status status = (*server)->RecordJob(); !status.ok()) {
    std::fprintf(stderr, "dcp_planner: --state-dir: %s\n",
                 std::string(status.message()).c_str());
    (*server)->Shutdown(absl::ZeroDuration());
    return kExitFailure;
  }
  std::printf("dcp_planner listening on %s, %s\n",
              WithPort(listen_address, (*server)->port()).c_str(),
              metrics_text.c_str());
  std::fflush(stdout);

  int signal_number = 0;
  while (sigwait(&stop_signals, &signal_number) != 0) {
  }
  LogLine(absl::StrCat("received ",
                       signal_number == SIGTERM ? "SIGTERM" : "SIGINT",
                       "; draining calls in flight for up to ",
                       absl::FormatDuration(*drain_timeout)));
  (*server)->Shutdown(*drain_timeout);
  LogLine("planner stopped");
  return kExitOk;
}

}  // namespace dcp
