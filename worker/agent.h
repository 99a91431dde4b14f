// The worker agent: one process per rank. It sequences the phases of a run,
// each its own module: placement (backend, device), rendezvous (register,
// find rank 0's store), building the model, checkpoint coordination
// (resume), profiling, then per step a plan from its plan source, the
// PlanExecutor, world consensus (whether to stop), the run summary and
// checkpoints.

#ifndef DCP_WORKER_AGENT_H_
#define DCP_WORKER_AGENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "cost_model/memory_model.h"
#include "planner/client/planner_client.h"
#include "planner/plan/plan.h"
#include "planner/workload/workload.h"
#include "worker/communication/communicator.h"
#include "worker/execution/profiler.h"
#include "worker/run_summary.h"
#include "worker/worker_metrics.h"

namespace dcp {

/// Where each step's plan comes from.
enum class PlanSource {
  /// GetPlan from the planner (DCP's per-batch plans).
  kPlanner,
  /// A peer strategy's plans (WorkerAgentOptions::peer_strategy: bucket,
  /// best-static, megatron-dyncp, ...), computed locally on the planner's
  /// cost model (StrategyPlanSource), to run the same batches its way.
  kPeer,
};

/// Makes the world's communicator; CreateC10dCommunicator by default.
using CommunicatorFactory =
    std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
        const C10dOptions& options)>;

struct WorkerAgentOptions {
  // --- Identity and rendezvous ---------------------------------------------
  /// Stable id (the pod name); re-registering with it keeps the ranks.
  std::string worker_id;
  /// This process's incarnation, sent with every planner call (a restart
  /// takes over worker_id, and the planner refuses the earlier process);
  /// empty: Run makes a new one (NewIncarnation).
  std::string incarnation;
  /// The node this process runs on; the ranks of a node are separate
  /// processes sharing this name.
  std::string node_name;
  /// The job the launcher started this worker for (--job-id, $DCP_JOB_ID);
  /// sent with the registration. Empty: none.
  std::string job_id;
  /// Host the other ranks reach this worker's c10d store on (used when the
  /// planner makes it rank 0).
  std::string store_host = "127.0.0.1";
  /// Port of that store; 0 picks a free port before registering (binds port
  /// 0 on store_host and releases it).
  int store_port = 0;
  /// "gloo", "nccl", or empty: NCCL on a GPU when this LibTorch has CUDA and
  /// a GPU is visible, else Gloo on the CPU.
  std::string backend;
  /// How long to wait for every rank to register before giving up.
  absl::Duration world_timeout = absl::Minutes(10);
  /// Once the world is complete, how long the other workers may take to say
  /// they are joining (RendezvousOptions::join_timeout).
  absl::Duration join_timeout = absl::Seconds(30);
  /// Backoff of the registration polls while the world is incomplete.
  absl::Duration poll_initial_backoff = absl::Milliseconds(100);
  absl::Duration poll_max_backoff = absl::Seconds(2);
  /// Timeout of the store, of each collective and of creating a group.
  absl::Duration collective_timeout = absl::Seconds(60);
  /// Makes the communicator (tests inject fakes); empty: c10d.
  CommunicatorFactory create_communicator;

  // --- Profiling -------------------------------------------------------------
  /// Profile (collectively) and submit the samples, unless the planner
  /// already has fitted parameters (e.g. a restarted job).
  bool profile = true;
  /// Its device and dtype are set by the agent.
  ProfileOptions profile_options;

  // --- Training --------------------------------------------------------------
  /// Steps of the whole run (a resumed run continues up to this step).
  int64_t steps = 10;
  /// Workload spec (planner/workload/workload.h), seed and batch size: every rank
  /// builds the same deterministic stream; step k runs its k-th batch.
  std::string workload = "longtail";
  uint64_t workload_seed = 1;
  BatchOptions batch = {/*global_batch_tokens=*/16384,
                        /*global_batch_samples=*/0};
  PlanSource plan_source = PlanSource::kPlanner;
  /// kPeer: the strategy (IsPeerStrategy, planner/strategies/peer_registry.h).
  std::string peer_strategy = "bucket";
  /// kPeer: the static strategies' sequences per bucket micro-batch, and
  /// their static SP size (0: the smallest on which the workload's longest
  /// sequence fits).
  int bucket_micro_batch_sequences = 1;
  int bucket_static_sp = 0;
  /// Token source: "synthetic", "synthetic:SEED" or "tokens:PREFIX" (a
  /// .bin/.idx token file, see worker/dataset.h).
  std::string data = "synthetic";
  /// Seeds the initial weights (equal on every rank).
  uint64_t model_seed = 0;
  double learning_rate = 1e-3;
  /// kFp32: float32 everywhere; kBf16: bfloat16 weights and activations
  /// with float32 gradients and master weights (PlanExecutor).
  TrainingPrecision precision = TrainingPrecision::kFp32;
  /// ZeRO-1 sharding of the master weights and AdamW states.
  bool zero1 = false;
  /// C10dOptions::max_cached_groups: the most SP sub-groups a rank keeps
  /// (0: unbounded); -1: by backend (MaxCachedGroupsFor: the NCCL default,
  /// unbounded on Gloo). Sent with the registration: the planner's memory
  /// model counts 1 + this many communicators per rank.
  int max_cached_groups = -1;

  // --- Checkpoints and output
  // --------------------------------------------------
  /// Where rank 0 writes checkpoints; empty: none.
  std::string checkpoint_dir;
  /// Write one every this many steps (0: only when stopping or finishing).
  int64_t checkpoint_every = 0;
  /// Continue from the checkpoint in checkpoint_dir when there is one (every
  /// rank reads it, so the directory must be shared).
  bool resume = false;
  /// How long ranks wait for each other around checkpoint I/O: for rank 0
  /// to write one (then all learn whether it succeeded) and for every rank
  /// to read one on resume. Larger than collective_timeout: a large model's
  /// checkpoint on shared storage can take minutes.
  absl::Duration checkpoint_timeout = absl::Minutes(30);
  /// Rank 0 writes the run summary (worker/run_summary.h) here after every
  /// step; empty: none.
  std::string summary_file;

  // --- Hooks
  // -------------------------------------------------------------------
  /// Diagnostics (one line each, no newline); empty: stderr.
  std::function<void(const std::string&)> log;
  /// Rank 0's report (the fit and one line per step); empty: stdout.
  std::function<void(const std::string&)> print;
  /// Polled between steps (and while waiting for the world): true asks the
  /// job to stop at the next step boundary. Empty: never.
  std::function<bool()> stop_requested;
  /// Waits between registration polls; empty: absl::SleepFor.
  std::function<void(absl::Duration)> sleep;
};

/// What a run did.
struct AgentRunResult {
  int rank = -1;
  int world_size = 0;
  /// Steps run: [first_step, next_step).
  int64_t first_step = 0;
  int64_t next_step = 0;
  /// The run stopped early at a step boundary because stop_requested said
  /// so (every rank stops at the same boundary).
  bool stopped_on_request = false;
  /// Every step of this run (on every rank).
  std::vector<StepRecord> steps;
};

/// The worker agent of one rank: registers with the planner (RegisterWorker,
/// polled with backoff until the world is complete), joins the world with
/// c10d (rank 0 hosts the TCPStore at the address it announced), builds the
/// model of the planner's ModelSpec with the same seed on every rank (a
/// GptModel, or a DitModel for a diffusion-transformer spec),
/// profiles on request (RunProfile; each rank submits its own samples; rank
/// 0 prints the fit), then trains `steps` steps: the plan of each step's
/// batch comes from GetPlan (rank 0 also submits the next batch ahead) or
/// from PlanBucket, runs with a PlanExecutor, and every rank reports its
/// measurements (ReportStepStats, metrics); rank 0 prints one line per step
/// and writes checkpoints and the summary. At each step boundary the ranks
/// agree, with a one-element all-reduce, whether any was asked to stop; if
/// so they all stop there, rank 0 writes a checkpoint, and Run() returns OK
/// with stopped_on_request set.
///
/// Errors carry the failing phase: the planner's status after the client's
/// retries (UNAVAILABLE when it cannot be reached), DEADLINE_EXCEEDED when
/// the world does not complete in time or a collective times out (never a
/// silent hang), INVALID_ARGUMENT for bad options.
///
/// Not thread-safe: one thread calls Run(), once.
class WorkerAgent {
 public:
  /// `planner`, `clock` and `metrics` (may be null) must outlive the agent.
  WorkerAgent(PlannerClient& planner, WorkerAgentOptions options,
              const Clock& clock = RealClock::Get(),
              WorkerMetrics* metrics = nullptr);

  absl::StatusOr<AgentRunResult> Run();

 private:
  PlannerClient& planner_;
  WorkerAgentOptions options_;
  const Clock& clock_;
  WorkerMetrics* metrics_;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_H_
