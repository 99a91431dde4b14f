#include "worker/execution/device_sync.h"

#include <utility>

#include "worker/libtorch_cuda.h"

namespace dcp {

void SynchronizeDevice(const torch::Device& device) {
#if DCP_LIBTORCH_HAS_CUDA
  if (device.is_cuda()) {
    torch::cuda::synchronize(device.has_index() ? device.index() : -1);
  }
#else
  (void)device;
#endif
}

std::function<void()> DeviceWaiter(const torch::Device& device,
                                   std::function<void()> injected) {
  if (injected) return injected;
  if (device.is_cuda()) return [device] { SynchronizeDevice(device); };
  return {};
}

}  // namespace dcp
