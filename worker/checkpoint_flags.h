#ifndef DCP_WORKER_CHECKPOINT_FLAGS_H_
#define DCP_WORKER_CHECKPOINT_FLAGS_H_

// A dcp run's checkpoint flags, read and checked once for dcp_worker and for
// dcp_local_job (which passes them on to its workers).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/command_line.h"

namespace dcp {

/// --checkpoint-dir, --checkpoint-every and --resume.
struct CheckpointFlags {
  /// Where rank 0 writes checkpoints ("": none).
  std::string dir;
  /// A checkpoint every this many steps (0: only at the end or when
  /// stopped).
  int64_t every = 0;
  /// Continue from the checkpoint in `dir`.
  bool resume = false;
};

/// The checkpoint flags of `flags`, whose table declares all three.
/// INVALID_ARGUMENT for a --checkpoint-every outside [0, 2^40], or for
/// --resume or --checkpoint-every > 0 without --checkpoint-dir.
absl::StatusOr<CheckpointFlags> ReadCheckpointFlags(const ParsedFlags& flags);

}  // namespace dcp

#endif  // DCP_WORKER_CHECKPOINT_FLAGS_H_
