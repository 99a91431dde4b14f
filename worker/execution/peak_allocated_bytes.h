// The most bytes a device's allocator held at once over a span of work.

#ifndef DCP_WORKER_EXECUTION_PEAK_ALLOCATED_BYTES_H_
#define DCP_WORKER_EXECUTION_PEAK_ALLOCATED_BYTES_H_

#include <cstdint>

#include "torch/torch.h"

namespace dcp {

/// Measures the bytes allocated on `device` from construction on: CUDA's
/// caching-allocator statistics on a GPU, CpuAllocationMeter on the CPU
/// while it is installed; nothing otherwise (measured() is false).
///
/// Constructing one resets the device's peak statistic, so at most one may
/// be live per device at a time. Not thread-safe.
class PeakAllocatedBytes {
 public:
  explicit PeakAllocatedBytes(const torch::Device& device);

  /// Whether this device's allocations are measured.
  bool measured() const { return measured_; }
  /// Bytes allocated when this was constructed; -1 when not measured.
  int64_t start_bytes() const { return start_bytes_; }
  /// Most bytes allocated at once since construction (everything the
  /// process holds on the device, what was there before included); -1 when
  /// not measured.
  int64_t Peak() const;

 private:
  torch::Device device_;
  int index_ = 0;
  bool measured_ = false;
  int64_t start_bytes_ = -1;
};

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_PEAK_ALLOCATED_BYTES_H_
