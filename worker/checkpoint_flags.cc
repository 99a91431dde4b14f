#include "worker/checkpoint_flags.h"

#include "absl/status/status.h"
#include "common/status_macros.h"

namespace dcp {

absl::StatusOr<CheckpointFlags> ReadCheckpointFlags(const ParsedFlags& flags) {
  CheckpointFlags checkpoint;
  checkpoint.dir = flags.String("checkpoint-dir");
  DCP_ASSIGN_OR_RETURN(checkpoint.every,
                       flags.Int("checkpoint-every", 0, int64_t{1} << 40));
  DCP_ASSIGN_OR_RETURN(checkpoint.resume, flags.Bool("resume"));
  if ((checkpoint.resume || checkpoint.every > 0) && checkpoint.dir.empty()) {
    return absl::InvalidArgumentError(
        "--resume and --checkpoint-every need --checkpoint-dir");
  }
  return checkpoint;
}

}  // namespace dcp
