#include "worker/placement.h"

#if DCP_LIBTORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#ifndef DCP_LIBTORCH_HAS_CUDA
#error "DCP_LIBTORCH_HAS_CUDA is undefined: depend on @libtorch//:cuda"
#endif

namespace dcp {
namespace {

bool CudaUsable() {
#if DCP_LIBTORCH_HAS_CUDA
  return torch::cuda::is_available();
#else
  return false;
#endif
}

}  // namespace

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

torch::Device DeviceOfRank(const std::string& backend, int rank,
                           int gpus_per_node) {
#if DCP_LIBTORCH_HAS_CUDA
  if (backend == "nccl") {
    const int devices = static_cast<int>(torch::cuda::device_count());
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(
                                           (rank % gpus_per_node) % devices));
  }
#else
  (void)backend;
  (void)rank;
  (void)gpus_per_node;
#endif
  return torch::kCPU;
}

void ResetPeakMemory(const torch::Device& device) {
#if DCP_LIBTORCH_HAS_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  }
#else
  (void)device;
#endif
}

int64_t PeakMemoryBytes(const torch::Device& device) {
#if DCP_LIBTORCH_HAS_CUDA
  if (device.is_cuda()) {
    constexpr size_t kAggregate = static_cast<size_t>(
        c10::CachingDeviceAllocator::StatType::AGGREGATE);
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index())
        .allocated_bytes[kAggregate]
        .peak;
  }
#else
  (void)device;
#endif
  return 0;  // The CPU allocator reports no peak.
}

}  // namespace dcp
