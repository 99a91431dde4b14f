#include "worker/execution/cpu_allocation_meter.h"

#include <utility>

#include "c10/core/CPUAllocator.h"

namespace dcp {
namespace {

// One counted allocation: the inner allocator's DataPtr (freeing it frees
// the memory) and its size.
struct Counted {
  c10::DataPtr inner;
  int64_t bytes;
};

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
  const c10::Device device = data.device();
  auto* counted = new Counted{std::move(data), static_cast<int64_t>(bytes)};
  const int64_t now = current_bytes_.fetch_add(counted->bytes) + counted->bytes;
  int64_t peak = peak_bytes_.load();
  while (now > peak && !peak_bytes_.compare_exchange_weak(peak, now)) {
  }
  return c10::DataPtr(raw, counted, &CpuAllocationMeter::Free, device);
}

void CpuAllocationMeter::copy_data(void* dest, const void* src,
                                   std::size_t count) const {
  default_copy_data(dest, src, count);
}

void CpuAllocationMeter::Free(void* context) {
  auto* counted = static_cast<Counted*>(context);
  Get().current_bytes_.fetch_sub(counted->bytes);
  delete counted;
}

}  // namespace dcp
