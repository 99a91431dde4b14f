#include "worker/worker_main_lib.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/command_line.h"
#include "common/main_prologue.h"
#include "common/process_support.h"
#include "common/status_macros.h"
#include "cost_model/memory_model.h"
#include "planner/client/planner_client.h"
#include "prometheus/exposer.h"
#include "torch/torch.h"
#include "planner/strategies/peer_registry.h"
#include "planner/workload/workload.h"
#include "worker/agent.h"
#include "worker/checkpoint_flags.h"
#include "worker/execution/dataset.h"
#include "worker/prometheus_worker_metrics.h"

namespace dcp {
namespace {

constexpr FlagSpec kFlags[] = {
    // Planner.
    {"planner", "HOST:PORT", "",
     "the planner's gRPC address (any gRPC target); else "
     "$DCP_PLANNER_ADDRESS"},
    {"token-file", "FILE", "",
     "file holding the planner's bearer token (e.g. a mounted Kubernetes "
     "Secret); else $DCP_PLANNER_TOKEN; else no token"},
    {"tls-ca", "FILE", "",
     "CA that signed the planner's certificate (PEM); enables TLS"},
    {"tls-cert", "FILE", "",
     "this worker's certificate chain (PEM), for mutual TLS"},
    {"tls-key", "FILE", "", "this worker's private key (PEM), for mutual TLS"},
    {"tls-server-name", "NAME", "",
     "name to check the planner's certificate against (default: the host)"},
    {"rpc-timeout", "DURATION", "10s", "deadline of each planner call"},
    {"rpc-attempts", "N", "5",
     "attempts per planner call at least (retried only while UNAVAILABLE, "
     "with backoff)"},
    {"planner-outage-tolerance", "DURATION", "5m",
     "past --rpc-attempts, how long planner calls keep retrying while the "
     "planner is unreachable (e.g. its pod restarting on the same "
     "--state-dir), counted from the outage's start across calls; the run "
     "fails after it; 0: --rpc-attempts only"},
    // Identity and rendezvous.
    {"worker-id", "ID", "",
     "stable id of this worker; else $DCP_WORKER_ID; else HOSTNAME-PID"},
    {"node-name", "NAME", "",
     "node this rank runs on (ranks of a node share it); else "
     "$DCP_NODE_NAME; else the host name"},
    {"job-id", "ID", "",
     "the job the launcher started this worker for, sent when registering "
     "(a planner with --job-id refuses other jobs' workers); else "
     "$DCP_JOB_ID; else none"},
    {"store-host", "HOST", "",
     "host the other ranks reach this worker's c10d store on, if it becomes "
     "rank 0; else $DCP_STORE_HOST; else the host name"},
    {"store-port", "PORT", "0",
     "port of that store; 0 picks a free one before registering"},
    {"backend", "auto|gloo|nccl", "auto",
     "collectives: auto is NCCL when LibTorch has CUDA and a GPU is visible, "
     "else Gloo"},
    {"world-timeout", "DURATION", "10m",
     "how long to wait for every rank to register"},
    {"join-timeout", "DURATION", "30s",
     "once the world is complete, how long every worker has to join it "
     "(a worker that registered and went silent fails its peers after this, "
     "naming it)"},
    {"collective-timeout", "DURATION", "60s",
     "timeout of the store and of every collective (a hung peer fails the "
     "job after it)"},
    // Profiling and training.
    {"profile", nullptr, "true",
     "profile (collectively) and submit the samples first, unless the "
     "planner already has a fitted cost model"},
    {"profile-gemm-tokens", "N,N,...", "",
     "GEMM sizes (tokens per rank) to profile (default: the profiler's)"},
    {"profile-attention-lengths", "N,N,...", "",
     "sequence lengths of the attention profile (default: the profiler's)"},
    {"profile-repeats", "N", "",
     "timed runs per profile measurement (default: the profiler's)"},
    {"steps", "N", "10", "steps of the run (a resumed run continues to it)"},
    {"workload", "SPEC", "longtail",
     "sequence lengths (planner/workload/workload.h), e.g. "
     "longtail:median=64,max=2048"},
    {"seed", "S", "1", "seed of the workload's batch stream"},
    {"global-batch-tokens", "T", "16384", "tokens per global batch"},
    {"global-batch-samples", "B", "",
     "sequences per global batch, instead of --global-batch-tokens"},
    {"plan-source", "planner|STRATEGY", "planner",
     "planner: GetPlan per step (DCP); or a peer strategy's plans computed "
     "here from the planner's cost model: bucket (the static bucket "
     "baseline), packed, best-static, megatron-dyncp, megatron-hcp or "
     "videosys-dcp (those tuned over a run are tuned on the run's --steps "
     "batches)"},
    {"bucket-micro-batch-sequences", "M", "1",
     "sequences per micro-batch of the bucket plans"},
    {"static-sp", "S", "0",
     "SP size of the bucket plans (0: the smallest that fits the workload's "
     "longest sequence)"},
    {"data", "synthetic[:SEED]|tokens:PREFIX", "synthetic",
     "where tokens come from (each rank reads only its micro-batches' "
     "samples); a DiT model reads synthetic latent patches of the same seed"},
    {"model-seed", "S", "0", "seed of the initial weights (same on all ranks)"},
    {"learning-rate", "LR", "0.001", "AdamW learning rate"},
    {"precision", "fp32|bf16", "fp32",
     "fp32: float32 everywhere; bf16: bfloat16 weights and activations, "
     "float32 gradient accumulation, float32 master weights and AdamW"},
    {"zero1", nullptr, "false",
     "shard the float32 master weights and AdamW states over the ranks "
     "(ZeRO-1: reduce-scatter, sharded update, all-gather)"},
    {"max-cached-groups", "N|auto", "auto",
     "most SP sub-groups a rank keeps (least recently used released first), "
     "so communicators stay within the memory the planner counts (it counts "
     "1 + N per rank); 0: no bound (Gloo only); auto: 4 on NCCL, no bound "
     "on Gloo"},
    {"torch-threads", "N", "0",
     "LibTorch intra-op threads (0: LibTorch's default)"},
    // Checkpoints and output.
    {"checkpoint-dir", "DIR", "",
     "where rank 0 writes checkpoints (shared by every rank for --resume)"},
    {"checkpoint-every", "K", "0",
     "write a checkpoint every K steps (0: only at the end or when stopped)"},
    {"resume", nullptr, "false",
     "continue from the checkpoint in --checkpoint-dir, if there is one"},
    {"checkpoint-timeout", "DURATION", "30m",
     "how long ranks wait for rank 0 to write a checkpoint, and for each "
     "other to read one on --resume"},
    {"summary-file", "FILE", "",
     "rank 0 writes the run's JSON summary here (per step: plan, predicted "
     "and measured seconds, loss)"},
    {"metrics-listen", "HOST:PORT", "",
     "Prometheus GET /metrics address (port 0 picks one); empty disables"},
};

/// dcp_worker's command line, for StartMain.
const ProgramSpec& WorkerProgram() {
  static const auto* const program = new ProgramSpec{
      "dcp_worker",
      "dcp_worker: one rank of a DCP training job. Registers with the "
      "planner (--planner=HOST:PORT or $DCP_PLANNER_ADDRESS), joins the c10d "
      "world, profiles, then runs each step's plan with LibTorch and reports "
      "its measurements.",
      kFlags,
      "Rank 0 prints the cost-model fit and one line per step:\n"
      "  step 3: plan SP[2,1,1] mb[1,3,2] recompute[0,0-1,0] | predicted "
      "0.123 s measured 0.150 s | loss 5.4321\n"
      "SIGTERM/SIGINT: finish the current step, stop with every rank at the "
      "same step boundary, write a checkpoint, exit 0 (a second signal exits "
      "at once).\nExit codes: 0 done or stopped, 1 the run failed, 2 usage "
      "error.\n"};
  return *program;
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
    return "localhost";
  }
  return name;
}

/// The flag if given, else the environment variable, else "".
std::string FlagOrEnvironment(const ParsedFlags& flags, const char* flag,
                              const char* variable) {
  if (flags.Given(flag)) return flags.String(flag);
  return EnvironmentValue(variable);
}

struct MainConfig {
  GrpcPlannerClient::Options client;
  WorkerAgentOptions agent;
  std::string metrics_listen;
  int torch_threads = 0;
};

/// The flag's duration; unlike ParsedFlags::Duration, "0" is one.
absl::StatusOr<absl::Duration> NonNegativeDuration(const ParsedFlags& flags,
                                                   const char* flag) {
  if (flags.String(flag) == "0") return absl::ZeroDuration();
  return flags.Duration(flag);
}

/// The error of a flag's value: "--FLAG=VALUE: <why>".
absl::Status FlagError(absl::string_view flag, absl::string_view value,
                       const absl::Status& status) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, ": ", status.message()));
}

/// Whether --workload (with --seed and the batch size) makes a batch stream
/// and --data names a dataset that opens, as the agent will build them
/// after joining the world. The model's vocabulary is not known before
/// registering, so a token file is checked against the largest one; the
/// agent checks it against the model's.
absl::Status CheckWorkloadFlags(const WorkerAgentOptions& agent) {
  absl::StatusOr<std::unique_ptr<LengthSource>> lengths =
      ParseWorkloadSpec(agent.workload);
  if (!lengths.ok()) {
    return FlagError("workload", agent.workload, lengths.status());
  }
  absl::StatusOr<BatchStream> stream = BatchStream::Create(
      *std::move(lengths), agent.batch, agent.workload_seed);
  if (!stream.ok()) {
    return FlagError("workload", agent.workload, stream.status());
  }
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      OpenDataset(agent.data, kMaxVocabSize);
  if (!dataset.ok()) return FlagError("data", agent.data, dataset.status());
  return absl::OkStatus();
}

/// The planner connection: address, token, TLS, deadlines and retries.
absl::Status ConfigureClient(const ParsedFlags& flags, MainConfig& config) {
  config.client.target =
      FlagOrEnvironment(flags, "planner", "DCP_PLANNER_ADDRESS");
  if (config.client.target.empty()) {
    return absl::InvalidArgumentError(
        "no planner address: give --planner=HOST:PORT or set "
        "$DCP_PLANNER_ADDRESS");
  }
  DCP_ASSIGN_OR_RETURN(auto token, LoadBearerToken(flags));
  config.client.bearer_token = token;
  config.client.tls.root_ca_file = flags.String("tls-ca");
  config.client.tls.cert_file = flags.String("tls-cert");
  config.client.tls.key_file = flags.String("tls-key");
  config.client.tls.server_name_override = flags.String("tls-server-name");
  if (config.client.tls.cert_file.empty() !=
      config.client.tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together: give both or neither");
  }
  if (!config.client.tls.cert_file.empty() &&
      config.client.tls.root_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert/--tls-key need --tls-ca (mutual TLS is TLS)");
  }
  DCP_ASSIGN_OR_RETURN(auto rpc_timeout, flags.Duration("rpc-timeout"));
  config.client.call_deadline = rpc_timeout;
  DCP_ASSIGN_OR_RETURN(config.client.retry.max_attempts,
                       flags.Int32("rpc-attempts", 1, 100));
  DCP_ASSIGN_OR_RETURN(config.client.retry.outage_tolerance,
                       NonNegativeDuration(flags, "planner-outage-tolerance"));
  config.client.retry.seed = static_cast<uint64_t>(::getpid());
  return absl::OkStatus();
}

/// Identity, rendezvous and the timeouts of joining and running the world.
absl::Status ConfigureWorld(const ParsedFlags& flags,
                            WorkerAgentOptions& agent) {
  agent.worker_id = FlagOrEnvironment(flags, "worker-id", "DCP_WORKER_ID");
  if (agent.worker_id.empty()) {
    agent.worker_id = absl::StrCat(HostName(), "-", ::getpid());
  }
  agent.node_name = FlagOrEnvironment(flags, "node-name", "DCP_NODE_NAME");
  if (agent.node_name.empty()) agent.node_name = HostName();
  agent.job_id = FlagOrEnvironment(flags, "job-id", "DCP_JOB_ID");
  agent.store_host = FlagOrEnvironment(flags, "store-host", "DCP_STORE_HOST");
  if (agent.store_host.empty()) agent.store_host = HostName();
  DCP_ASSIGN_OR_RETURN(agent.store_port, flags.Int32("store-port", 0, 65535));
  const std::string backend = flags.String("backend");
  if (backend != "auto" && backend != "gloo" && backend != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend=", backend, ": expected auto, gloo or nccl"));
  }
  agent.backend = backend == "auto" ? "" : backend;
  DCP_ASSIGN_OR_RETURN(auto world_timeout, flags.Duration("world-timeout"));
  agent.world_timeout = world_timeout;
  DCP_ASSIGN_OR_RETURN(auto join_timeout, flags.Duration("join-timeout"));
  agent.join_timeout = join_timeout;
  DCP_ASSIGN_OR_RETURN(auto collective_timeout,
                       flags.Duration("collective-timeout"));
  agent.collective_timeout = collective_timeout;
  DCP_ASSIGN_OR_RETURN(auto checkpoint_timeout,
                       flags.Duration("checkpoint-timeout"));
  agent.checkpoint_timeout = checkpoint_timeout;
  return absl::OkStatus();
}

/// Whether and what to profile.
absl::Status ConfigureProfile(const ParsedFlags& flags,
                              WorkerAgentOptions& agent) {
  DCP_ASSIGN_OR_RETURN(auto profile, flags.Bool("profile"));
  agent.profile = profile;
  // Whole micro-batches and the optimizer step, for the fixed costs
  // (cost_model/micro_batch_fit.h).
  agent.profile_options.micro_batch_shapes = DefaultMicroBatchProfileShapes();
  agent.profile_options.sp_micro_batch_shapes =
      DefaultSpMicroBatchProfileShapes();
  agent.profile_options.optimizer_step = true;
  if (flags.Given("profile-gemm-tokens")) {
    DCP_ASSIGN_OR_RETURN(auto sizes, flags.IntList("profile-gemm-tokens"));
    agent.profile_options.gemm_tokens = sizes;
  }
  if (flags.Given("profile-attention-lengths")) {
    DCP_ASSIGN_OR_RETURN(auto lengths,
                         flags.IntList("profile-attention-lengths"));
    agent.profile_options.attention_lengths = lengths;
  }
  if (flags.Given("profile-repeats")) {
    DCP_ASSIGN_OR_RETURN(agent.profile_options.repeats,
                         flags.Int32("profile-repeats", 1, 1000));
  }
  return absl::OkStatus();
}

/// Steps, the workload and its batches, and where plans come from.
absl::Status ConfigureWorkload(const ParsedFlags& flags,
                               WorkerAgentOptions& agent) {
  DCP_ASSIGN_OR_RETURN(auto steps, flags.Int("steps", 0, int64_t{1} << 40));
  agent.steps = steps;
  agent.workload = flags.String("workload");
  DCP_ASSIGN_OR_RETURN(auto seed, flags.Uint64("seed"));
  agent.workload_seed = seed;
  if (flags.Given("global-batch-samples")) {
    if (flags.Given("global-batch-tokens")) {
      return absl::InvalidArgumentError(
          "give --global-batch-tokens or --global-batch-samples, not both");
    }
    DCP_ASSIGN_OR_RETURN(
        auto samples, flags.Int("global-batch-samples", 1, int64_t{1} << 40));
    agent.batch = BatchOptions{/*global_batch_tokens=*/0,
                               /*global_batch_samples=*/samples};
  } else {
    DCP_ASSIGN_OR_RETURN(auto tokens,
                         flags.Int("global-batch-tokens", 1, int64_t{1} << 50));
    agent.batch = BatchOptions{/*global_batch_tokens=*/tokens,
                               /*global_batch_samples=*/0};
  }
  const std::string plan_source = flags.String("plan-source");
  if (plan_source == "planner") {
    agent.plan_source = PlanSource::kPlanner;
  } else if (IsPeerStrategy(plan_source)) {
    agent.plan_source = PlanSource::kPeer;
    agent.peer_strategy = plan_source;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--plan-source=", plan_source, ": expected planner or a peer strategy (",
        absl::StrJoin(PeerStrategyNames(), ", "), ")"));
  }
  DCP_ASSIGN_OR_RETURN(agent.bucket_micro_batch_sequences,
                       flags.Int32("bucket-micro-batch-sequences", 1, 1 << 20));
  DCP_ASSIGN_OR_RETURN(agent.bucket_static_sp,
                       flags.Int32("static-sp", 0, 1 << 16));
  agent.data = flags.String("data");
  // Checked here, before registering: a bad spec found after joining the
  // world would fail this rank mid-run and leave its peers with a
  // misleading peer error.
  DCP_RETURN_IF_ERROR(CheckWorkloadFlags(agent));
  return absl::OkStatus();
}

/// The model, precision, optimizer, threads, checkpoints and outputs.
absl::Status ConfigureTraining(const ParsedFlags& flags, MainConfig& config) {
  WorkerAgentOptions& agent = config.agent;
  DCP_ASSIGN_OR_RETURN(auto model_seed, flags.Uint64("model-seed"));
  agent.model_seed = model_seed;
  DCP_ASSIGN_OR_RETURN(auto learning_rate,
                       flags.Double("learning-rate", /*min=*/0,
                                    std::numeric_limits<double>::infinity(),
                                    /*min_exclusive=*/true));
  agent.learning_rate = learning_rate;
  const std::string precision = flags.String("precision");
  const std::optional<TrainingPrecision> parsed =
      TrainingPrecisionFromName(precision);
  if (!parsed.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--precision=", precision, ": expected fp32 or bf16"));
  }
  agent.precision = *parsed;
  DCP_ASSIGN_OR_RETURN(auto zero1, flags.Bool("zero1"));
  agent.zero1 = zero1;
  if (flags.String("max-cached-groups") == "auto") {
    agent.max_cached_groups = -1;
  } else {
    DCP_ASSIGN_OR_RETURN(agent.max_cached_groups,
                         flags.Int32("max-cached-groups", 0, 1 << 20));
  }
  DCP_ASSIGN_OR_RETURN(config.torch_threads,
                       flags.Int32("torch-threads", 0, 1024));

  DCP_ASSIGN_OR_RETURN(const CheckpointFlags checkpoint,
                       ReadCheckpointFlags(flags));
  agent.checkpoint_dir = checkpoint.dir;
  agent.checkpoint_every = checkpoint.every;
  agent.resume = checkpoint.resume;
  agent.summary_file = flags.String("summary-file");
  config.metrics_listen = flags.String("metrics-listen");
  return absl::OkStatus();
}

absl::StatusOr<MainConfig> Configure(const ParsedFlags& flags) {
  MainConfig config;
  DCP_RETURN_IF_ERROR(ConfigureClient(flags, config));
  DCP_RETURN_IF_ERROR(ConfigureWorld(flags, config.agent));
  DCP_RETURN_IF_ERROR(ConfigureProfile(flags, config.agent));
  DCP_RETURN_IF_ERROR(ConfigureWorkload(flags, config.agent));
  DCP_RETURN_IF_ERROR(ConfigureTraining(flags, config));
  return config;
}

/// Signals received: the first asks the agent to stop at the next step
/// boundary, the second exits at once.
std::atomic<int> stop_signals{0};

void OnStopSignal(int signal_number) {
  if (stop_signals.fetch_add(1) >= 1) {
    constexpr char kMessage[] = "dcp_worker: second signal, exiting now\n";
    (void)!::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    ::_exit(128 + signal_number);
  }
}

void InstallStopHandlers() {
  struct sigaction action = {};
  action.sa_handler = &OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  // A file-size limit (RLIMIT_FSIZE) then fails the write that passes it
  // with EFBIG, a checked error, instead of killing the process.
  ::signal(SIGXFSZ, SIG_IGN);
}

}  // namespace

int RunWorkerMain(int argc, char** argv) {
  const MainStart start = StartMain(WorkerProgram(), argc, argv);
  if (!start.flags.has_value()) return start.exit_code;
  absl::StatusOr<MainConfig> config = Configure(*start.flags);
  if (!config.ok()) {
    return PrintUsageError(std::cerr, WorkerProgram().name,
                           config.status().message());
  }
  InstallStopHandlers();
  if (config->torch_threads > 0) torch::set_num_threads(config->torch_threads);

  const std::string worker_id = config->agent.worker_id;
  config->client.log = [worker_id](const std::string& line) {
    LogLine(absl::StrCat("dcp_worker ", worker_id, ": ", line));
  };
  // SIGTERM also ends a wait for an unreachable planner, not only a run.
  config->client.stop_requested = [] { return stop_signals.load() > 0; };
  absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> client =
      GrpcPlannerClient::Create(config->client);
  if (!client.ok()) {
    return PrintUsageError(std::cerr, WorkerProgram().name,
                           client.status().message());
  }
  PrometheusWorkerMetrics metrics;
  std::unique_ptr<prometheus::Exposer> exposer;
  if (!config->metrics_listen.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(config->metrics_listen);
    } catch (const std::exception& e) {
      return PrintUsageError(
          std::cerr, WorkerProgram().name,
          absl::StrCat("--metrics-listen=", config->metrics_listen, ": ",
                       e.what()));
    }
    exposer->RegisterCollectable(metrics.registry());
    const std::vector<int> ports = exposer->GetListeningPorts();
    LogLine(absl::StrCat("dcp_worker ", config->agent.worker_id,
                         ": metrics on port ",
                         ports.empty() ? 0 : ports.front()));
  }

  WorkerAgentOptions options = config->agent;
  options.log = &LogLine;
  options.stop_requested = [] { return stop_signals.load() > 0; };
  WorkerAgent agent(**client, std::move(options), RealClock::Get(), &metrics);
  absl::StatusOr<AgentRunResult> result = agent.Run();
  if (!result.ok() && result.status().code() == absl::StatusCode::kCancelled &&
      stop_signals.load() > 0) {
    LogLine(absl::StrCat("dcp_worker ", config->agent.worker_id,
                         ": stopped on request: ", result.status().message()));
    return kExitOk;
  }
  if (!result.ok()) {
    LogLine(absl::StrCat("dcp_worker ", config->agent.worker_id,
                         ": error: ", result.status().ToString()));
    return kExitFailure;
  }
  LogLine(absl::StrCat(
      "dcp_worker ", config->agent.worker_id, " (rank ", result->rank,
      "): ", result->stopped_on_request ? "stopped on request" : "done",
      " after steps ", result->first_step, "..", result->next_step - 1));
  return kExitOk;
}

}  // namespace dcp
