// World consensus: the one-value agreements of every rank of the world
// (whether to stop, whether to profile, whether the checkpoint was written,
// which checkpoint step to resume from), each one small all-reduce.

#ifndef DCP_WORKER_WORLD_CONSENSUS_H_
#define DCP_WORKER_WORLD_CONSENSUS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "torch/torch.h"
#include "worker/communication/communicator.h"

namespace dcp {

/// Agreements over `communicator`'s world. Every rank must make the same
/// calls in the same order (each is a collective). A failed or timed-out
/// collective is returned as "agreeing <what>: <its error>", after which the
/// communicator should be abandoned.
///
/// Not thread-safe: one thread issues the collectives; `communicator` must
/// outlive this object.
class WorldConsensus {
 public:
  /// The all-reduce buffers live on `device` (the backend's device: a GPU
  /// for NCCL).
  WorldConsensus(Communicator& communicator, torch::Device device)
      : communicator_(communicator), device_(device) {}

  /// The sum of every rank's `value`, waiting at most `timeout`.
  absl::StatusOr<double> Sum(double value, absl::string_view what,
                             absl::Duration timeout);

  /// True when any rank's `mine` is true.
  absl::StatusOr<bool> Any(bool mine, absl::string_view what,
                           absl::Duration timeout);

  /// Every rank's `value`, by rank (an all-reduce of one-hot vectors).
  absl::StatusOr<std::vector<double>> Gather(double value,
                                             absl::string_view what,
                                             absl::Duration timeout);

  int rank() const { return communicator_.rank(); }
  int world_size() const { return communicator_.world_size(); }

 private:
  absl::Status AllReduce(torch::Tensor& values, absl::string_view what,
                         absl::Duration timeout);

  Communicator& communicator_;
  torch::Device device_;
};

}  // namespace dcp

#endif  // DCP_WORKER_WORLD_CONSENSUS_H_
