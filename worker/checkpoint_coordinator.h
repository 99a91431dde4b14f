// Checkpoint coordination: which steps end with a checkpoint, rank 0
// writing it while every rank learns whether it was written, and every rank
// resuming from the same one.

#ifndef DCP_WORKER_CHECKPOINT_COORDINATOR_H_
#define DCP_WORKER_CHECKPOINT_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "torch/torch.h"
#include "worker/execution/checkpoint.h"
#include "worker/world_consensus.h"

namespace dcp {

struct CheckpointCoordinatorOptions {
  /// Where rank 0 writes the checkpoint (execution/checkpoint.h); shared by
  /// every rank, which all read it on resume. Empty: no checkpoints.
  std::string dir;
  /// Write one every this many steps (0: only when stopping or finishing).
  int64_t every = 0;
  /// How long ranks wait for each other around checkpoint I/O (rank 0's
  /// write; every rank's read). Longer than a collective timeout: a large
  /// model's checkpoint on shared storage can take minutes.
  absl::Duration timeout = absl::Minutes(30);
  /// The model's name, stored with the checkpoint and checked on resume.
  std::string model_name;
  /// How rank 0 writes the checkpoint file; empty: WriteFileAtomically.
  /// Tests inject a failing disk.
  CheckpointFileWriter write_file;
  /// The run's precision and ZeRO-1 setting, stored with the checkpoint and
  /// checked on resume (execution/checkpoint.h's CheckCheckpointSettings).
  CheckpointSettings settings;
  /// Needed with master weights (settings.has_master_weights()):
  /// PlanExecutor's GatherMasterWeightState (a collective every rank calls
  /// before rank 0 writes; `keep` on rank 0 only) and
  /// LoadMasterWeightState (on resume).
  std::function<absl::StatusOr<MasterWeightState>(bool keep)> gather_master;
  std::function<absl::Status(const MasterWeightState&)> load_master;
};

/// Coordinates the checkpoints of one rank's run with the other ranks'
/// (through `consensus`, so every rank must make the same calls in the same
/// order). `model` and `optimizer` are what is saved and restored; with
/// master weights (bf16 or ZeRO-1) every rank's shard of them is gathered
/// to rank 0, which writes one file whatever the world size (rather than
/// one file per rank: the existing atomic write of one file stays the
/// commit point, and a run resumes on another world size or with ZeRO-1
/// switched, each rank taking its shard of the whole; the price is rank 0
/// holding the whole float32 state, 12 bytes per parameter, in host memory
/// while it writes).
///
/// Not thread-safe: the training thread calls it between steps. Everything
/// passed by reference must outlive it.
class CheckpointCoordinator {
 public:
  CheckpointCoordinator(CheckpointCoordinatorOptions options,
                        WorldConsensus& consensus, torch::nn::Module& model,
                        torch::optim::Optimizer& optimizer, const Clock& clock,
                        std::function<void(const std::string&)> log);

  /// Whether the boundary before step `next_step` (of `steps` in the run)
  /// gets a checkpoint: with a directory, when stopping, at the end, or
  /// every `every` steps.
  bool Due(int64_t next_step, int64_t steps, bool stopping) const;

  /// Rank 0 writes the checkpoint (next step `next_step`) while the others
  /// wait up to `timeout`; then every rank learns whether it was written
  /// and, if not, the kind of failure (its status code), so a failed write
  /// stops the whole job at once with a clear error on every rank: "checkpoint
  /// write failed on rank 0: No space left on device in DIR ...". Rank 0
  /// returns its error (its code: RESOURCE_EXHAUSTED for a full disk), the
  /// others ABORTED. The previous checkpoint stays as it was.
  absl::Status WriteOnEveryRank(int64_t next_step);

  /// Every rank reads the checkpoint in `dir` and the ranks check that they
  /// found the same one (FAILED_PRECONDITION naming both findings when not:
  /// the directory is not shared). Returns its next step, or nullopt when
  /// there is none.
  absl::StatusOr<std::optional<int64_t>> Resume();

  /// The checkpoint file (execution/checkpoint.h's CheckpointPath(dir)).
  std::string path() const;

 private:
  absl::Status Write(int64_t next_step, const MasterWeightState* master);

  const CheckpointCoordinatorOptions options_;
  WorldConsensus& consensus_;
  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  const Clock& clock_;
  std::function<void(const std::string&)> log_;
};

}  // namespace dcp

#endif  // DCP_WORKER_CHECKPOINT_COORDINATOR_H_
