// Training checkpoints: the model's parameters, the optimizer's state (with
// master weights: the float32 master weights and AdamW moments gathered
// from every rank's shard), the run's precision and ZeRO-1 setting and the
// next step, in one file written atomically. The data position needs no
// saving: every worker's batch stream is deterministic, so step k's batch is
// the k-th batch of the stream.

#ifndef DCP_WORKER_EXECUTION_CHECKPOINT_H_
#define DCP_WORKER_EXECUTION_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "torch/torch.h"
#include "worker/execution/master_weight_state.h"

namespace dcp {

/// How a run keeps its training state: the parameters' dtype and whether
/// ZeRO-1 shards the optimizer. Stored with a checkpoint; see
/// CheckCheckpointSettings for what may resume from what. Plain value.
struct CheckpointSettings {
  /// "fp32" or "bf16".
  std::string precision = "fp32";
  bool zero1 = false;

  /// Whether the run keeps float32 master weights apart from its
  /// parameters (bf16, or ZeRO-1): then a checkpoint holds
  /// MasterWeightState instead of the optimizer's own state.
  bool has_master_weights() const { return precision != "fp32" || zero1; }
  /// As the worker's flags: "--precision=bf16 --zero1",
  /// "--precision=fp32 without --zero1".
  std::string ToString() const;
};

/// OK when a run with `current` settings can continue a checkpoint written
/// with `saved`: the same precision, and master weights in both or in
/// neither (so bf16 resumes with or without ZeRO-1, and on any world size:
/// the state is saved whole). FAILED_PRECONDITION naming both settings
/// otherwise: another precision would not continue the same run, and
/// float32 without ZeRO-1 keeps torch's per-parameter AdamW state instead
/// of master weights.
absl::Status CheckCheckpointSettings(const CheckpointSettings& saved,
                                     const CheckpointSettings& current,
                                     const std::string& path);

/// The checkpoint file in `dir` ("<dir>/checkpoint.pt").
std::string CheckpointPath(const std::string& dir);

/// Replaces the file at `path` by `bytes`, atomically and durably, or fails
/// leaving it as it was and no other file behind. The default is
/// WriteFileAtomically (common/atomic_file.h); tests inject failures.
using CheckpointFileWriter = std::function<absl::Status(
    const std::string& path, absl::string_view bytes)>;

/// Writes `model`'s parameters and buffers, `optimizer`'s state, `next_step`
/// and `model_name` to CheckpointPath(dir): serialized in memory, then
/// written with `write_file` (WriteFileAtomically when empty: checked
/// writes to a temporary file in `dir`, fsync, rename over the previous
/// checkpoint), so a reader sees the old or the new checkpoint, never a
/// partial one, and a failed write (a full disk) is an error, not a crash.
/// Creates `dir` if missing. Errors name the directory and the OS error,
/// with its code: RESOURCE_EXHAUSTED for a full disk or quota,
/// PERMISSION_DENIED, else INTERNAL.
///
/// `settings` are stored with it. With master weights (settings say so)
/// `master` must be the gathered MasterWeightState, which is stored instead
/// of `optimizer`'s state (a shard).
absl::Status WriteCheckpoint(const std::string& dir, int64_t next_step,
                             const std::string& model_name,
                             const torch::nn::Module& model,
                             const torch::optim::Optimizer& optimizer,
                             const CheckpointFileWriter& write_file = {},
                             const CheckpointSettings& settings = {},
                             const MasterWeightState* master = nullptr);

/// Loads CheckpointPath(dir) into `model` and `optimizer` (which must have
/// the shapes they were saved with), onto the device of `model`'s
/// parameters whatever device it was saved from, and returns the next step;
/// nullopt when there is no checkpoint file. Errors: UNAVAILABLE when the
/// file system cannot say whether there is one, DATA_LOSS for an unreadable
/// or inconsistent file, FAILED_PRECONDITION when it was written for another
/// model (names differ) or its tensors do not fit `model`, or was written
/// with settings `settings` cannot continue (CheckCheckpointSettings; a
/// checkpoint without settings was written with the defaults). With master
/// weights nothing is loaded into `model` and `optimizer`: the saved
/// MasterWeightState goes to `*master` (which must not be null) for
/// PlanExecutor::LoadMasterWeightState.
absl::StatusOr<std::optional<int64_t>> ReadCheckpoint(
    const std::string& dir, const std::string& model_name,
    torch::nn::Module& model, torch::optim::Optimizer& optimizer,
    const CheckpointSettings& settings = {},
    MasterWeightState* master = nullptr);

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_CHECKPOINT_H_
