// RunLocalJob: the launcher's job on loopback. It writes the cluster file,
// starts the planner (planner_child.h), runs one dcp_worker per rank for
// dcp and then for each peer strategy while watching them, and prints the
// summary (job_summary.h) and the measured breakdowns (timeline_output.h).

#include "launcher/local_job.h"

#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/command_line.h"
#include "common/main_prologue.h"
#include "launcher/child_process.h"
#include "launcher/job_summary.h"
#include "launcher/local_job_config.h"
#include "launcher/planner_child.h"
#include "launcher/timeline_output.h"
#include "nlohmann/json.hpp"
#include "worker/run_summary.h"
#include "worker/step_timing_files.h"

namespace dcp {
namespace {

using nlohmann::json;

using Config = LocalJobConfig;

// --- Output -----------------------------------------------------------------

absl::Mutex output_mutex(absl::kConstInit);

void PrintLine(const std::string& line) {
  absl::MutexLock lock(&output_mutex);
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

void PrintError(const std::string& line) {
  absl::MutexLock lock(&output_mutex);
  std::fflush(stdout);
  std::fprintf(stderr, "dcp_local_job: %s\n", line.c_str());
  std::fflush(stderr);
}

// --- Signals
// ------------------------------------------------------------------

std::atomic<int> interrupt_signal{0};

void OnInterrupt(int signal_number) { interrupt_signal.store(signal_number); }

bool Interrupted() { return interrupt_signal.load() != 0; }

void InstallInterruptHandlers() {
  struct sigaction action = {};
  action.sa_handler = &OnInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
}

// --- The job
// --------------------------------------------------------------------

absl::Status WriteClusterSpec(const Config& config, const std::string& path) {
  // Figures of a CPU core (predictions until the profile is fitted; the
  // fit replaces the compute and communication ones).
  const json cluster = {
      {"num_nodes", config.nodes},
      {"gpus_per_node", config.ranks_per_node},
      {"gpu_memory_bytes", static_cast<double>(config.rank_memory_bytes)},
      {"usable_memory_fraction", 0.8},
      {"peak_flops_per_second", 50e9},
      {"gemm_flops_per_second", 20e9},
      {"hbm_bytes_per_second", 10e9},
      {"intra_node_bus_bytes_per_second", 2e9},
      {"intra_node_latency_seconds", 50e-6},
      {"inter_node_bus_bytes_per_second", 1e9},
      {"inter_node_latency_seconds", 100e-6},
      {"allreduce_intra_bus_bytes_per_second", 2e9}};
  std::ofstream file(path);
  file << cluster.dump(2) << "\n";
  file.close();
  if (!file) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

/// How one run of the workers went.
struct PhaseOutcome {
  RunSummary summary;
  bool interrupted = false;
};

/// Runs the workers of one phase to completion and returns rank 0's
/// summary: "dcp" (the planner's plans, `dcp_phase`) or a peer strategy's
/// run, whose name is its workers' --plan-source. On any failure every
/// worker is killed.
absl::StatusOr<PhaseOutcome> RunWorkers(const Config& config,
                                        PlannerChild& planner,
                                        const std::string& phase,
                                        bool dcp_phase, absl::Time deadline) {
  const std::string summary_path =
      absl::StrCat(config.work_dir, "/", phase, "_summary.json");
  std::filesystem::remove(summary_path);
  std::filesystem::remove_all(StepTimingDir(summary_path));
  auto sigterm_due = std::make_shared<std::atomic<bool>>(false);
  const std::string sigterm_line =
      absl::StrCat("step ", config.sigterm_after_step, ":");
  const bool drill = dcp_phase && config.sigterm_after_step >= 0;
  auto planner_drill_due = std::make_shared<std::atomic<bool>>(false);
  const std::string planner_drill_line =
      absl::StrCat("step ", config.restart_planner_after_step, ":");
  const bool planner_drill =
      dcp_phase && config.restart_planner_after_step >= 0;
  PlannerDrill drill_of_planner(config, planner, deadline, &Interrupted,
                                &PrintLine);

  std::vector<std::unique_ptr<ChildProcess>> workers;
  std::vector<std::string> logs;
  for (int index = 0; index < config.world_size(); ++index) {
    // The same ids in every phase: re-registering keeps each worker's rank.
    const std::string id = absl::StrCat("w", index);
    std::vector<std::string> argv = {
        config.worker_binary,
        absl::StrCat("--planner=127.0.0.1:", planner.port),
        absl::StrCat("--worker-id=", id),
        absl::StrCat("--job-id=", config.job_id),
        absl::StrCat("--node-name=node", index / config.ranks_per_node),
        "--store-host=127.0.0.1",
        absl::StrCat("--steps=", config.steps),
        absl::StrCat("--workload=", config.workload),
        absl::StrCat("--seed=", config.seed),
        absl::StrCat("--global-batch-tokens=", config.global_batch_tokens),
        absl::StrCat("--plan-source=", dcp_phase ? "planner" : phase),
        absl::StrCat("--profile=", config.profile ? "true" : "false"),
        absl::StrCat("--profile-attention-lengths=",
                     config.profile_attention_lengths),
        absl::StrCat("--profile-repeats=", config.profile_repeats),
        absl::StrCat("--torch-threads=", config.torch_threads),
        absl::StrCat("--collective-timeout=", config.collective_timeout),
        absl::StrCat("--summary-file=", summary_path),
        "--rpc-attempts=5",
        absl::StrCat("--planner-outage-tolerance=",
                     config.planner_outage_tolerance),
        "--world-timeout=2m"};
    if (dcp_phase && !config.checkpoint.dir.empty()) {
      argv.push_back(absl::StrCat("--checkpoint-dir=", config.checkpoint.dir));
      argv.push_back(
          absl::StrCat("--checkpoint-every=", config.checkpoint.every));
      if (config.checkpoint.resume) argv.push_back("--resume");
    }
    logs.push_back(absl::StrCat(config.work_dir, "/", phase, "-", id, ".log"));
    absl::StatusOr<std::unique_ptr<ChildProcess>> worker = ChildProcess::Start(
        argv, logs.back(),
        [sigterm_due, sigterm_line, drill, planner_drill_due,
         planner_drill_line, planner_drill](const std::string& line) {
          // Only rank 0 prints; its lines are the job's report.
          PrintLine(line);
          if (drill && absl::StartsWith(line, sigterm_line)) {
            sigterm_due->store(true);
          }
          if (planner_drill && absl::StartsWith(line, planner_drill_line)) {
            planner_drill_due->store(true);
          }
        });
    if (!worker.ok()) return worker.status();
    workers.push_back(*std::move(worker));
  }

  bool sigterm_sent = false;
  bool interrupted = false;
  std::vector<std::optional<int>> codes(workers.size());
  while (true) {
    bool all_done = true;
    for (size_t i = 0; i < workers.size(); ++i) {
      if (!codes[i].has_value()) codes[i] = workers[i]->Poll();
      if (!codes[i].has_value()) {
        all_done = false;
      } else if (*codes[i] != 0) {
        std::string report =
            absl::StrCat("worker w", i, " of the ", phase, " run (pid ",
                         workers[i]->pid(), ") exited with code ", *codes[i],
                         "; its log (", logs[i], "):\n", LogTail(logs[i], 15));
        for (size_t j = 0; j < workers.size(); ++j) {
          if (!codes[j].has_value()) workers[j]->Kill();
        }
        return absl::InternalError(report);
      }
    }
    if (all_done) break;
    if (planner_drill) {
      if (absl::Status status = drill_of_planner.Poll(planner_drill_due->load());
          !status.ok()) {
        for (auto& worker : workers) worker->Kill();
        return status;
      }
    }
    if (!drill_of_planner.planner_expected_up()) {
      // The drill stopped it; the workers wait for its restart.
    } else if (std::optional<int> code = planner.process->Poll();
               code.has_value()) {
      return absl::InternalError(
          absl::StrCat("dcp_planner exited with code ", *code, " during the ",
                       phase, " run; its log (", planner.log_path, "):\n",
                       LogTail(planner.log_path, 15)));
    }
    if (absl::Now() >= deadline) {
      for (auto& worker : workers) worker->Kill();
      return absl::DeadlineExceededError(absl::StrCat(
          "the job ran past --timeout=", absl::FormatDuration(config.timeout),
          " during the ", phase, " run; killed every process (logs in ",
          config.work_dir, ")"));
    }
    const bool interrupt = Interrupted();
    if (!sigterm_sent && (interrupt || sigterm_due->load())) {
      sigterm_sent = true;
      interrupted = interrupt;
      PrintLine(absl::StrCat("[dcp_local_job] sending SIGTERM to the ",
                             workers.size(), " workers",
                             interrupt ? " (interrupted)" : " (fault drill)"));
      for (auto& worker : workers) worker->Signal(SIGTERM);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (auto& worker : workers) worker->JoinOutput();

  PhaseOutcome outcome;
  outcome.interrupted = interrupted;
  absl::StatusOr<RunSummary> summary = ReadRunSummary(summary_path);
  if (absl::IsNotFound(summary.status()) && sigterm_sent) {
    // Stopped before the first step (e.g. while waiting for the world).
    outcome.summary.stopped_on_request = true;
    return outcome;
  }
  if (!summary.ok()) {
    return absl::InternalError(absl::StrCat(
        "rank 0 wrote no readable summary: ", summary.status().message()));
  }
  outcome.summary = *std::move(summary);
  return outcome;
}

/// The cost-model breakdown of each run and --timeline-step's pictures
/// (launcher/timeline_output.h).
absl::Status ReportMeasuredRuns(const Config& config, const RunSummary& dcp,
                                const std::vector<PeerRun>& peers) {
  MeasuredRunOutput output;
  output.label = "dcp";
  output.dir = StepTimingDir(absl::StrCat(config.work_dir, "/dcp_summary.json"));
  output.world_size = config.world_size();
  output.timeline_step = config.timeline_step;
  output.timeline_path =
      !config.timeline_out.empty()
          ? config.timeline_out
          : absl::StrCat(config.work_dir, "/timeline_step",
                         config.timeline_step, ".svg");
  PrintLine("");
  absl::Status status = ReportMeasuredRun(output, dcp, &PrintLine);
  for (const PeerRun& peer : peers) {
    MeasuredRunOutput peer_output = output;
    peer_output.label = peer.name;
    peer_output.dir = StepTimingDir(
        absl::StrCat(config.work_dir, "/", peer.name, "_summary.json"));
    peer_output.timeline_path = LabelledPath(output.timeline_path, peer.name);
    absl::Status peer_status =
        ReportMeasuredRun(peer_output, peer.summary, &PrintLine);
    if (status.ok()) status = peer_status;
  }
  return status;
}

absl::Status RunJob(Config& config) {
  const absl::Time deadline = absl::Now() + config.timeout;
  if (config.work_dir.empty()) {
    char pattern[] = "/tmp/dcp_local_job.XXXXXX";
    if (::mkdtemp(pattern) == nullptr) {
      return absl::InternalError("cannot create a work directory in /tmp");
    }
    config.work_dir = pattern;
  }
  std::error_code error;
  std::filesystem::create_directories(config.work_dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", config.work_dir, ": ", error.message()));
  }
  // The user's --planner-state-dir is never removed (it starts empty).
  if (const std::string state_dir = PlannerStateDir(config);
      config.planner_state_dir.empty() && !state_dir.empty()) {
    // A fresh state per job: the drill restarts the planner onto it.
    std::filesystem::remove_all(state_dir, error);
  }
  const std::string cluster_path =
      absl::StrCat(config.work_dir, "/cluster.json");
  if (absl::Status written = WriteClusterSpec(config, cluster_path);
      !written.ok()) {
    return written;
  }

  absl::StatusOr<PlannerChild> planner =
      StartPlanner(config, cluster_path, deadline, &Interrupted);
  if (!planner.ok()) return planner.status();
  PrintLine(absl::StrFormat(
      "[dcp_local_job] dcp_planner on 127.0.0.1:%d: model %s, %d nodes x %d "
      "ranks (%d dcp_worker processes), plans may use %.1f MB per rank",
      planner->port, config.model, config.nodes, config.ranks_per_node,
      config.world_size(), 0.8 * config.rank_memory_bytes / 1e6));
  if (const unsigned cores = std::thread::hardware_concurrency();
      cores > 0 && config.world_size() > static_cast<int>(cores)) {
    PrintLine(absl::StrFormat(
        "[dcp_local_job] note: %d ranks share %u cores, so a rank that waits "
        "lends its core to the others; the cost model prices separate GPUs "
        "and will misjudge such plans (use at most %u ranks for a fair "
        "stand-in for a cluster)",
        config.world_size(), cores, cores));
  }
  PrintLine(absl::StrCat("[dcp_local_job] workload ", config.workload, ", ",
                         config.global_batch_tokens,
                         " tokens per global batch, seed ", config.seed,
                         "; logs in ", config.work_dir));

  PrintLine("");
  PrintLine(absl::StrCat("== dcp: ", config.steps,
                         " steps with the planner's plans",
                         config.profile ? " (after profiling)" : "", " =="));
  absl::StatusOr<PhaseOutcome> dcp =
      RunWorkers(config, *planner, "dcp", /*dcp_phase=*/true, deadline);
  if (!dcp.ok()) {
    StopPlanner(*planner);
    return dcp.status();
  }
  if (dcp->interrupted) {
    StopPlanner(*planner);
    return absl::CancelledError(absl::StrCat(
        "interrupted; the workers stopped before step ", dcp->summary.next_step,
        config.checkpoint.dir.empty()
            ? std::string()
            : absl::StrCat(" (checkpoint in ", config.checkpoint.dir, ")")));
  }
  const bool stopped = dcp->summary.stopped_on_request;
  if (stopped) {
    PrintLine(absl::StrCat(
        "[dcp_local_job] every worker exited 0 at the step boundary before "
        "step ",
        dcp->summary.next_step,
        config.checkpoint.dir.empty()
            ? std::string()
            : absl::StrCat("; checkpoint in ", config.checkpoint.dir)));
  }

  // The peers' runs: bucket, then --compare-peers in order.
  std::vector<std::string> peer_names;
  if (config.compare_bucket) peer_names.push_back("bucket");
  peer_names.insert(peer_names.end(), config.compare_peers.begin(),
                    config.compare_peers.end());
  std::vector<PeerRun> peers;
  for (const std::string& name : stopped ? std::vector<std::string>()
                                         : peer_names) {
    PrintLine("");
    PrintLine(absl::StrCat(
        "== ", name, ": the same ", config.steps, " batches with ",
        name == "bucket" ? "the static bucket plans"
                         : absl::StrCat(name, "'s plans"),
        " =="));
    absl::StatusOr<PhaseOutcome> outcome =
        RunWorkers(config, *planner, name, /*dcp_phase=*/false, deadline);
    if (!outcome.ok()) {
      StopPlanner(*planner);
      return outcome.status();
    }
    if (outcome->interrupted) {
      StopPlanner(*planner);
      return absl::CancelledError(
          absl::StrCat("interrupted during the ", name, " run"));
    }
    peers.push_back({name, std::move(outcome->summary)});
  }
  StopPlanner(*planner);
  for (const std::string& line : JobSummaryLines(dcp->summary, peers)) {
    PrintLine(line);
  }
  return ReportMeasuredRuns(config, dcp->summary, peers);
}

}  // namespace

int RunLocalJobMain(int argc, char** argv) {
  const MainStart main_start = StartMain(LocalJobProgram(), argc, argv);
  if (!main_start.flags.has_value()) return main_start.exit_code;
  absl::StatusOr<Config> config =
      ConfigureLocalJob(*main_start.flags, argc > 0 ? argv[0] : "");
  if (!config.ok()) {
    return PrintUsageError(std::cerr, LocalJobProgram().name,
                           config.status().message());
  }
  InstallInterruptHandlers();
  const absl::Time start = absl::Now();
  absl::Status status = RunJob(*config);
  if (!status.ok()) {
    PrintError(absl::StrCat("FAILED: ", status.message()));
    return kExitFailure;
  }
  PrintLine(absl::StrFormat("[dcp_local_job] done in %.1f s",
                            absl::ToDoubleSeconds(absl::Now() - start)));
  return kExitOk;
}

}  // namespace dcp
