#ifndef DCP_WORKER_EXECUTION_CPU_ALLOCATION_METER_H_
#define DCP_WORKER_EXECUTION_CPU_ALLOCATION_METER_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

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
/// through it (Get() is never destroyed). Thread-safe: counters are atomic,
/// the live allocations are guarded by a mutex.
class CpuAllocationMeter final : public c10::Allocator {
 public:
  /// The process's meter (never destroyed).
  static CpuAllocationMeter& Get();

  /// Routes c10's CPU allocations through the meter; idempotent.
  void Install();
  /// Restores the allocator Install() replaced. Tensors allocated while
  /// installed are still uncounted correctly when freed later.
  void Uninstall();

  /// Whether Install() was called more recently than Uninstall().
  bool installed() const { return installed_.load(); }
  /// Bytes allocated through the meter and not yet freed.
  int64_t current_bytes() const { return current_bytes_.load(); }
  /// The highest current_bytes() since the last ResetPeak().
  int64_t peak_bytes() const { return peak_bytes_.load(); }
  /// Sets the peak to the current bytes.
  void ResetPeak() { peak_bytes_.store(current_bytes_.load()); }

  /// Simple pointers (context == data), as raw_allocate requires.
  c10::DataPtr allocate(size_t bytes) override;
  c10::DeleterFnPtr raw_deleter() const override { return &Free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

 private:
  CpuAllocationMeter() = default;
  static void Free(void* data);

  /// The inner allocator's DataPtr (freeing it frees the memory) and size of
  /// each live counted allocation, by its data pointer.
  struct Counted {
    c10::DataPtr inner;
    int64_t bytes;
  };
  std::mutex mutex_;
  std::unordered_map<void*, Counted> live_;  // guarded by mutex_

  std::atomic<c10::Allocator*> inner_{nullptr};
  std::atomic<bool> installed_{false};
  std::atomic<int64_t> current_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};
};

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_CPU_ALLOCATION_METER_H_
