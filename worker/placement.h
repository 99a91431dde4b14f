// Placement: where one rank's model and collectives run (the c10d backend
// and the torch device), and the device's peak memory over a step.

#ifndef DCP_WORKER_PLACEMENT_H_
#define DCP_WORKER_PLACEMENT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "torch/torch.h"

namespace dcp {

/// The backend and device of one rank. Plain value.
struct Placement {
  /// "gloo" or "nccl".
  std::string backend = "gloo";
  torch::Device device = torch::kCPU;
};

/// The backend for `requested`: "gloo"; "nccl" (FAILED_PRECONDITION unless
/// this LibTorch has CUDA and a GPU is visible); empty: nccl when it could
/// be, else gloo. INVALID_ARGUMENT for any other name. Thread-safe.
absl::StatusOr<std::string> ChooseBackend(const std::string& requested);

/// The device rank `rank` uses with `backend`: for nccl, GPU
/// (rank % gpus_per_node) % visible GPUs (the ranks of a node share its
/// GPUs in order); for gloo, the CPU. Thread-safe.
torch::Device DeviceOfRank(const std::string& backend, int rank,
                           int gpus_per_node);

/// Starts a new peak of the memory allocated on `device` (CUDA; nothing on
/// the CPU, whose allocator keeps no peak). Not thread-safe with respect to
/// other users of the device's allocator statistics.
void ResetPeakMemory(const torch::Device& device);

/// The peak bytes allocated on `device` since ResetPeakMemory; 0 on the CPU.
int64_t PeakMemoryBytes(const torch::Device& device);

}  // namespace dcp

#endif  // DCP_WORKER_PLACEMENT_H_
