#include "worker/execution/peak_allocated_bytes.h"

#if DCP_LIBTORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "worker/execution/cpu_allocation_meter.h"
#include "worker/libtorch_cuda.h"

namespace dcp {
namespace {

#if DCP_LIBTORCH_HAS_CUDA
constexpr size_t kAggregate =
    static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
#endif

}  // namespace

PeakAllocatedBytes::PeakAllocatedBytes(const torch::Device& device)
    : device_(device) {
#if DCP_LIBTORCH_HAS_CUDA
  if (device_.is_cuda()) {
    index_ =
        device_.has_index() ? device_.index() : c10::cuda::current_device();
    c10::cuda::CUDACachingAllocator::resetPeakStats(index_);
    start_bytes_ = c10::cuda::CUDACachingAllocator::getDeviceStats(index_)
                       .allocated_bytes[kAggregate]
                       .current;
    measured_ = true;
    return;
  }
#endif
  CpuAllocationMeter& meter = CpuAllocationMeter::Get();
  if (device_.is_cpu() && meter.installed()) {
    meter.ResetPeak();
    start_bytes_ = meter.current_bytes();
    measured_ = true;
  }
}

int64_t PeakAllocatedBytes::Peak() const {
  if (!measured_) return -1;
#if DCP_LIBTORCH_HAS_CUDA
  if (device_.is_cuda()) {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(index_)
        .allocated_bytes[kAggregate]
        .peak;
  }
#endif
  return CpuAllocationMeter::Get().peak_bytes();
}

}  // namespace dcp
