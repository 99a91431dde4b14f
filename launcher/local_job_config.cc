#include "launcher/local_job_config.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "planner/strategies/peer_registry.h"

namespace dcp {
namespace {

constexpr char kDefaultWorkload[] =
    "longtail:median=64,sigma=1.0,tail_fraction=0.05,tail_min=512,alpha=1.2,"
    "max=2048,min=16";

constexpr FlagSpec kFlags[] = {
    {"planner-binary", "PATH", "",
     "the dcp_planner binary (default: found next to this one in bazel-bin "
     "or its runfiles)"},
    {"worker-binary", "PATH", "", "the dcp_worker binary (default: likewise)"},
    {"work-dir", "DIR", "",
     "logs, cluster spec, summaries and checkpoints (default: a new "
     "/tmp/dcp_local_job.XXXXXX, kept)"},
    {"job-id", "ID", "dcp-local-job",
     "job id of the planner and every worker (their --job-id): the planner "
     "refuses registrations of other jobs"},
    {"nodes", "N", "2", "nodes of the simulated cluster"},
    {"ranks-per-node", "N", "1",
     "ranks per node (one dcp_worker process each); the default world of 2 "
     "ranks gives each rank one core of a 2-core machine, as each GPU of a "
     "cluster is its own (more ranks than cores lend idle ranks' cores to "
     "the others, which no cost model of separate GPUs describes)"},
    {"model", "NAME|FILE", "tiny", "the planner's --model"},
    {"rank-memory-bytes", "BYTES", "14000000",
     "memory of one rank in the cluster spec; plans may use 80% of it (the "
     "default, with the float32 activations the workers measure, makes the "
     "workload's long sequences need SP 2 or recompute)"},
    {"workload", "SPEC", kDefaultWorkload,
     "sequence lengths (planner/workload/workload.h)"},
    {"global-batch-tokens", "T", "16384",
     "tokens per global batch (steps of a few tenths of a second: shorter "
     "ones are mostly the two cores' scheduling noise)"},
    {"seed", "S", "1", "seed of the batch stream"},
    {"steps", "N", "12", "steps with dcp plans (and with bucket plans)"},
    {"profile", nullptr, "true", "profile and fit the cost model first"},
    {"profile-attention-lengths", "N,N,...", "8,16,256,512,1024",
     "the workers' --profile-attention-lengths: on a CPU, attention keeps "
     "its score matrix, so its cost per FLOP is flat from ~256 tokens and "
     "lower in cache below; very short lengths show the fixed cost per call "
     "so that the fit's efficiency curve comes out physical"},
    {"profile-repeats", "N", "3", "the workers' --profile-repeats"},
    {"online-refit", nullptr, "true",
     "the planner rescales its compute model from the measured micro-batch "
     "times as steps are reported (its --online-refit)"},
    {"phased-plans", nullptr, "true",
     "the planner also tries plans that re-group the ranks within a step "
     "(phases with a world barrier between them; its --phased-plans) and "
     "serves one where predicted faster"},
    {"phased-min-gap", "FRACTION", "0.03",
     "with --phased-plans: phases are tried for a batch whose one-layout "
     "plan is at least this far above its lower bound (the planner's "
     "--phased-min-gap; 0: every batch)"},
    {"compare-bucket", nullptr, "true",
     "then run the same batches with the static bucket plans"},
    {"compare-peers", "LIST", "best-static,megatron-dyncp",
     "then run the same batches with each of these peer strategies' plans "
     "(made by the workers on the planner's cost model, those tuned over a "
     "run tuned on its batches): any of packed, best-static, "
     "megatron-dyncp, megatron-hcp, videosys-dcp; empty: none"},
    {"timeline-step", "K", "-1",
     "draw step K's plan with the measured micro-batch times beside the "
     "predicted ones (SVG; the bucket run's too, as FILE.bucket.svg)"},
    {"timeline-out", "FILE", "",
     "where --timeline-step's SVG goes (default: <work-dir>/"
     "timeline_step<K>.svg)"},
    {"checkpoint-dir", "DIR", "",
     "the dcp run's checkpoint directory (shared by its workers)"},
    {"checkpoint-every", "K", "0", "checkpoint every K steps of the dcp run"},
    {"resume", nullptr, "false",
     "the dcp run continues from the checkpoint in --checkpoint-dir"},
    {"sigterm-after-step", "K", "-1",
     "send SIGTERM to every worker once rank 0 reports step K (a fault "
     "drill: they stop together at a step boundary and checkpoint)"},
    {"restart-planner-after-step", "K", "-1",
     "a fault drill: once rank 0 reports step K, stop the planner with "
     "--planner-stop-signal, keep it down for --planner-down-for, then "
     "restart it on the same port and --state-dir (the planner then keeps "
     "its state in WORK_DIR/planner_state)"},
    {"planner-state-dir", "DIR", "",
     "the planner's --state-dir (default: none, or WORK_DIR/planner_state "
     "with --restart-planner-after-step); `dcp timeline --state-dir=DIR "
     "--step=K` draws a step from it, predicted vs measured"},
    {"planner-stop-signal", "KILL|TERM", "KILL",
     "how the drill stops the planner: SIGKILL (a crash) or SIGTERM (a "
     "drained shutdown)"},
    {"planner-down-for", "DURATION", "30s",
     "how long the drill keeps the planner down after it exited"},
    {"planner-outage-tolerance", "DURATION", "5m",
     "the workers' --planner-outage-tolerance"},
    {"torch-threads", "N", "1", "LibTorch threads per worker"},
    {"collective-timeout", "DURATION", "60s",
     "the workers' store and collective timeout"},
    {"timeout", "DURATION", "10m",
     "the whole job's limit; then every process is killed"},
};

std::string Directory(const std::string& path) {
  return std::filesystem::path(path).parent_path().string();
}

bool IsExecutable(const std::string& path) {
  return !path.empty() && ::access(path.c_str(), X_OK) == 0 &&
         std::filesystem::is_regular_file(path);
}

/// `name` (e.g. "worker/dcp_worker") next to this binary: in bazel-bin, in
/// this binary's runfiles, or in the runfiles of a test that runs it.
absl::StatusOr<std::string> FindBinary(const std::string& flag_value,
                                       const char* flag,
                                       const std::string& workspace_path,
                                       const char* argv0) {
  if (!flag_value.empty()) {
    if (!IsExecutable(flag_value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, "=", flag_value, " is not executable"));
    }
    return flag_value;
  }
  std::vector<std::string> bin_dirs;  // Directories standing for bazel-bin.
  std::error_code error;
  const std::string self =
      std::filesystem::read_symlink("/proc/self/exe", error).string();
  for (const std::string& binary : {std::string(argv0), self}) {
    if (binary.empty()) continue;
    // <bin>/launcher/dcp_local_job -> <bin>
    const std::string package_dir = Directory(binary);
    bin_dirs.push_back(Directory(package_dir));
    bin_dirs.push_back(absl::StrCat(binary, ".runfiles/dcp"));
  }
  for (const char* variable : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* value = std::getenv(variable); value != nullptr) {
      bin_dirs.push_back(absl::StrCat(value, "/dcp"));
    }
  }
  std::vector<std::string> tried;
  for (const std::string& dir : bin_dirs) {
    const std::string candidate =
        dir.empty() ? workspace_path : absl::StrCat(dir, "/", workspace_path);
    if (IsExecutable(candidate)) return candidate;
    tried.push_back(candidate);
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot find ", workspace_path, " (tried ", absl::StrJoin(tried, ", "),
      "); build it (bazel build //launcher:dcp_local_job builds both "
      "binaries) or pass --",
      flag));
}

}  // namespace

/// dcp_local_job's command line, for StartMain.
const ProgramSpec& LocalJobProgram() {
  static const auto* const program = new ProgramSpec{
      "dcp_local_job",
      "dcp_local_job: a whole DCP training job on 127.0.0.1: the real "
      "dcp_planner and one dcp_worker process per rank (LibTorch + Gloo on "
      "the CPU), first with the planner's per-batch plans, then the same "
      "batches with the static bucket plans.",
      kFlags,
      "Exit codes: 0 success, 1 a process failed or the job timed out or was "
      "interrupted, 2 usage error.\n"};
  return *program;
}

absl::StatusOr<LocalJobConfig> ConfigureLocalJob(const ParsedFlags& flags,
                                                 const char* argv0) {
  LocalJobConfig config;
  DCP_ASSIGN_OR_RETURN(
      auto planner, FindBinary(flags.String("planner-binary"), "planner-binary",
                               "planner/service/dcp_planner", argv0));
  config.planner_binary = planner;
  DCP_ASSIGN_OR_RETURN(
      auto worker, FindBinary(flags.String("worker-binary"), "worker-binary",
                              "worker/dcp_worker", argv0));
  config.worker_binary = worker;
  config.work_dir = flags.String("work-dir");
  config.job_id = flags.String("job-id");
  DCP_ASSIGN_OR_RETURN(config.nodes, flags.Int32("nodes", 1, 64));
  DCP_ASSIGN_OR_RETURN(config.ranks_per_node,
                       flags.Int32("ranks-per-node", 1, 64));
  config.model = flags.String("model");
  DCP_ASSIGN_OR_RETURN(auto memory,
                       flags.Int("rank-memory-bytes", 1, int64_t{1} << 50));
  config.rank_memory_bytes = memory;
  config.workload = flags.String("workload");
  DCP_ASSIGN_OR_RETURN(auto tokens,
                       flags.Int("global-batch-tokens", 1, int64_t{1} << 40));
  config.global_batch_tokens = tokens;
  DCP_ASSIGN_OR_RETURN(auto seed, flags.Int("seed", 0, int64_t{1} << 62));
  config.seed = seed;
  DCP_ASSIGN_OR_RETURN(auto steps, flags.Int("steps", 1, 1 << 20));
  config.steps = steps;
  DCP_ASSIGN_OR_RETURN(auto profile, flags.Bool("profile"));
  config.profile = profile;
  config.profile_attention_lengths = flags.String("profile-attention-lengths");
  DCP_ASSIGN_OR_RETURN(auto repeats, flags.Int("profile-repeats", 1, 1000));
  config.profile_repeats = repeats;
  DCP_ASSIGN_OR_RETURN(auto online_refit, flags.Bool("online-refit"));
  config.online_refit = online_refit;
  DCP_ASSIGN_OR_RETURN(auto phased_plans, flags.Bool("phased-plans"));
  config.phased_plans = phased_plans;
  DCP_ASSIGN_OR_RETURN(auto min_gap, flags.Double("phased-min-gap", 0, 1));
  config.phased_min_gap = min_gap;
  DCP_ASSIGN_OR_RETURN(auto compare, flags.Bool("compare-bucket"));
  config.compare_bucket = compare;
  config.compare_peers.clear();
  for (absl::string_view peer :
       absl::StrSplit(flags.String("compare-peers"), ',', absl::SkipEmpty())) {
    const std::string name(peer);
    if (name == "bucket" || !IsPeerStrategy(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--compare-peers: '", name, "' is not a peer strategy; expected ",
          absl::StrJoin(PeerStrategyNames(), ", "),
          " (bucket runs with --compare-bucket)"));
    }
    if (std::find(config.compare_peers.begin(), config.compare_peers.end(),
                  name) == config.compare_peers.end()) {
      config.compare_peers.push_back(name);
    }
  }
  DCP_ASSIGN_OR_RETURN(auto timeline_step,
                       flags.Int("timeline-step", -1, 1 << 20));
  config.timeline_step = timeline_step;
  if (config.timeline_step >= config.steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--timeline-step=", config.timeline_step, " is past the last step (",
        config.steps - 1, " with --steps=", config.steps, ")"));
  }
  config.timeline_out = flags.String("timeline-out");
  DCP_ASSIGN_OR_RETURN(config.checkpoint, ReadCheckpointFlags(flags));
  DCP_ASSIGN_OR_RETURN(auto sigterm,
                       flags.Int("sigterm-after-step", -1, 1 << 20));
  config.sigterm_after_step = sigterm;
  DCP_ASSIGN_OR_RETURN(auto restart_after,
                       flags.Int("restart-planner-after-step", -1, 1 << 20));
  config.restart_planner_after_step = restart_after;
  config.planner_state_dir = flags.String("planner-state-dir");
  if (std::error_code error;
      !config.planner_state_dir.empty() &&
      std::filesystem::exists(config.planner_state_dir, error) &&
      !std::filesystem::is_empty(config.planner_state_dir, error)) {
    // Never removed by the job, so it must start empty.
    return absl::InvalidArgumentError(absl::StrCat(
        "--planner-state-dir=", config.planner_state_dir,
        " is not empty; give a new or empty directory for this job's "
        "planner state"));
  }
  const std::string stop_signal = flags.String("planner-stop-signal");
  if (stop_signal == "KILL") {
    config.planner_stop_signal = SIGKILL;
  } else if (stop_signal == "TERM") {
    config.planner_stop_signal = SIGTERM;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--planner-stop-signal=", stop_signal, ": expected KILL or TERM"));
  }
  DCP_ASSIGN_OR_RETURN(auto down_for, flags.Duration("planner-down-for"));
  config.planner_down_for = down_for;
  // 0 (the workers' --rpc-attempts alone) is a valid tolerance.
  if (flags.String("planner-outage-tolerance") == "0") {
    config.planner_outage_tolerance = "0";
  } else {
    DCP_ASSIGN_OR_RETURN(auto outage_tolerance,
                         flags.Duration("planner-outage-tolerance"));
    config.planner_outage_tolerance = absl::FormatDuration(outage_tolerance);
  }
  DCP_ASSIGN_OR_RETURN(auto threads, flags.Int("torch-threads", 0, 256));
  config.torch_threads = threads;
  DCP_ASSIGN_OR_RETURN(auto collective, flags.Duration("collective-timeout"));
  config.collective_timeout = absl::FormatDuration(collective);
  DCP_ASSIGN_OR_RETURN(auto timeout, flags.Duration("timeout"));
  config.timeout = timeout;
  return config;
}

}  // namespace dcp
