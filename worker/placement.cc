#include "worker/placement.h"

#if DCP_LIBTORCH_HAS_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <exception>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/libtorch_cuda.h"

namespace dcp {

absl::StatusOr<std::string> ChooseBackend(const std::string& requested) {
  if (requested.empty()) return CudaUsable() ? "nccl" : "gloo";
  if (requested == "gloo") return requested;
  if (requested == "nccl") {
    if (!CudaUsable()) {
      return absl::FailedPreconditionError(
          "backend nccl needs a LibTorch built with CUDA and a visible GPU; "
          "use gloo on this machine (or leave the backend unset to choose)");
    }
    return requested;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "backend \"", requested, "\" is not supported; use gloo or nccl"));
}

absl::StatusOr<int> GpuIndexOfRank(int rank, int gpus_per_node,
                                   int visible_gpus) {
  if (rank < 0 || gpus_per_node < 1 || visible_gpus < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placing rank ", rank, " on a node of ", gpus_per_node,
        " GPUs with ", visible_gpus,
        " visible: the rank must be >= 0 and both counts >= 1 (is a GPU "
        "visible to this process? check CUDA_VISIBLE_DEVICES)"));
  }
  if (visible_gpus == 1) return 0;
  if (visible_gpus < gpus_per_node) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this process sees ", visible_gpus, " GPUs but its node runs ",
        gpus_per_node,
        " ranks, so ranks would share GPUs: give each rank one GPU "
        "(CUDA_VISIBLE_DEVICES=<its GPU>) or let every rank see all ",
        gpus_per_node, " of the node's GPUs"));
  }
  return rank % gpus_per_node;
}

absl::StatusOr<torch::Device> DeviceOfRank(const std::string& backend,
                                           int rank, int gpus_per_node) {
#if DCP_LIBTORCH_HAS_CUDA
  if (backend == "nccl") {
    const absl::StatusOr<int> index = GpuIndexOfRank(
        rank, gpus_per_node, static_cast<int>(torch::cuda::device_count()));
    if (!index.ok()) return index.status();
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(*index));
  }
#else
  (void)backend;
  (void)rank;
  (void)gpus_per_node;
#endif
  return torch::Device(torch::kCPU);
}

absl::Status UseDevice(const torch::Device& device) {
#if DCP_LIBTORCH_HAS_CUDA
  if (device.is_cuda()) {
    try {
      c10::cuda::set_device(device.index());
    } catch (const std::exception& error) {
      return absl::InternalError(absl::StrCat(
          "making ", device.str(), " the current CUDA device: ", error.what()));
    }
  }
#else
  (void)device;
#endif
  return absl::OkStatus();
}

}  // namespace dcp
