// Placement: where one rank's model and collectives run (the c10d backend
// and the torch device).

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

/// The GPU index rank `rank` uses among the `visible_gpus` this process
/// sees: its place on its node, rank % gpus_per_node (the planner numbers
/// the ranks of a node consecutively), when the process sees the node's
/// GPUs; 0 when it sees exactly one (CUDA_VISIBLE_DEVICES gives each rank
/// its own). FAILED_PRECONDITION when it sees more than one but fewer than
/// gpus_per_node (ranks would share a GPU), INVALID_ARGUMENT for a rank
/// below 0 or counts below 1. Pure; thread-safe.
absl::StatusOr<int> GpuIndexOfRank(int rank, int gpus_per_node,
                                   int visible_gpus);

/// The device rank `rank` uses with `backend`: for nccl, the GPU of
/// GpuIndexOfRank over the GPUs this process sees (its errors); for gloo,
/// the CPU. Thread-safe.
absl::StatusOr<torch::Device> DeviceOfRank(const std::string& backend,
                                           int rank, int gpus_per_node);

/// Makes `device` this process's current CUDA device, so that every later
/// allocation, kernel, barrier and NCCL communicator without an explicit
/// device lands on it rather than on GPU 0; nothing for the CPU. Call once,
/// before creating any communicator. INTERNAL when CUDA refuses.
absl::Status UseDevice(const torch::Device& device);

}  // namespace dcp

#endif  // DCP_WORKER_PLACEMENT_H_
