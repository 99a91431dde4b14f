#ifndef DCP_WORKER_EXECUTION_CPU_ALLOCATION_METER_H_
#define DCP_WORKER_EXECUTION_CPU_ALLOCATION_METER_H_

#include <atomic>
#include <cstdint>

#include "c10/core/Allocator.h"

namespace dcp {

/// Measures the bytes LibTorch holds in CPU tensors: while installed, every
/// CPU allocation goes through this meter (which forwards to the allocator it
/// replaced) and is counted until freed. The CPU counterpart of CUDA's
/// allocator statistics, for checking memory models on a machine without a
/// GPU.
///
/// Process-wide: Install() replaces c10's CPU allocator, so at most one meter
/// may be installed at a time and it must outlive every tensor allocated
/// through it (tests keep one static instance). Counters are atomic; any
/// thread may allocate and read.
class CpuAllocationMeter final : public c10::Allocator {
 public:
  /// The process's meter (never destroyed).
  static CpuAllocationMeter& Get();

  /// Routes c10's CPU allocations through the meter; idempotent.
  void Install();
  /// Restores the allocator Install() replaced. Tensors allocated while
  /// installed are still uncounted correctly when freed later.
  void Uninstall();

  /// Bytes allocated through the meter and not yet freed.
  int64_t current_bytes() const { return current_bytes_.load(); }
  /// The highest current_bytes() since the last ResetPeak().
  int64_t peak_bytes() const { return peak_bytes_.load(); }
  /// Sets the peak to the current bytes.
  void ResetPeak() { peak_bytes_.store(current_bytes_.load()); }

  c10::DataPtr allocate(size_t bytes) override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

 private:
  CpuAllocationMeter() = default;
  static void Free(void* context);

  std::atomic<c10::Allocator*> inner_{nullptr};
  std::atomic<bool> installed_{false};
  std::atomic<int64_t> current_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};
};

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_CPU_ALLOCATION_METER_H_
