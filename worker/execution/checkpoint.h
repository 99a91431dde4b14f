// Training checkpoints: the model's parameters, the optimizer's state and the
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

namespace dcp {

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
absl::Status WriteCheckpoint(const std::string& dir, int64_t next_step,
                             const std::string& model_name,
                             const torch::nn::Module& model,
                             const torch::optim::Optimizer& optimizer,
                             const CheckpointFileWriter& write_file = {});

/// Loads CheckpointPath(dir) into `model` and `optimizer` (which must have
/// the shapes they were saved with), onto the device of `model`'s
/// parameters whatever device it was saved from, and returns the next step;
/// nullopt when there is no checkpoint file. Errors: UNAVAILABLE when the
/// file system cannot say whether there is one, DATA_LOSS for an unreadable
/// or inconsistent file, FAILED_PRECONDITION when it was written for another
/// model (names differ) or its tensors do not fit `model`.
absl::StatusOr<std::optional<int64_t>> ReadCheckpoint(
    const std::string& dir, const std::string& model_name,
    torch::nn::Module& model, torch::optim::Optimizer& optimizer);

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_CHECKPOINT_H_
