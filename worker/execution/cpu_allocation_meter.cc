#include "worker/execution/cpu_allocation_meter.h"

#include <utility>

#include "c10/core/CPUAllocator.h"

namespace dcp {
namespace {

// Priority above c10's default CPU allocator (0), so Install() wins.
constexpr uint8_t kMeterPriority = 1;

}  // namespace

CpuAllocationMeter& CpuAllocationMeter::Get() {
  static CpuAllocationMeter* const meter = new CpuAllocationMeter();
  return *meter;
}

void CpuAllocationMeter::Install() {
  if (installed_.exchange(true)) return;
  inner_.store(c10::GetCPUAllocator());
  c10::SetCPUAllocator(this, kMeterPriority);
}

void CpuAllocationMeter::Uninstall() {
  if (!installed_.exchange(false)) return;
  c10::SetCPUAllocator(inner_.load(), kMeterPriority);
}

c10::DataPtr CpuAllocationMeter::allocate(size_t bytes) {
  c10::Allocator* inner = inner_.load();
  if (inner == nullptr) inner = c10::GetDefaultCPUAllocator();
  c10::DataPtr data = inner->allocate(bytes);
  void* raw = data.get();
  // Empty allocations may share a (null) pointer: pass them through.
  if (bytes == 0 || raw == nullptr) return data;
  const c10::Device device = data.device();
  const int64_t size = static_cast<int64_t>(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.emplace(raw, Counted{std::move(data), size});
  }
  const int64_t now = current_bytes_.fetch_add(size) + size;
  int64_t peak = peak_bytes_.load();
  while (now > peak && !peak_bytes_.compare_exchange_weak(peak, now)) {
  }
  return c10::DataPtr(raw, raw, &CpuAllocationMeter::Free, device);
}

void CpuAllocationMeter::copy_data(void* dest, const void* src,
                                   std::size_t count) const {
  default_copy_data(dest, src, count);
}

void CpuAllocationMeter::Free(void* data) {
  CpuAllocationMeter& meter = Get();
  c10::DataPtr inner;
  {
    std::lock_guard<std::mutex> lock(meter.mutex_);
    auto it = meter.live_.find(data);
    if (it == meter.live_.end()) return;  // Never counted: not ours.
    meter.current_bytes_.fetch_sub(it->second.bytes);
    inner = std::move(it->second.inner);
    meter.live_.erase(it);
  }
  // `inner` frees the memory here, outside the lock.
}

}  // namespace dcp
