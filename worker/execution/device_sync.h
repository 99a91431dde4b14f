// Waiting for a device's queued work, so that a clock read after it sees
// the work done.

#ifndef DCP_WORKER_EXECUTION_DEVICE_SYNC_H_
#define DCP_WORKER_EXECUTION_DEVICE_SYNC_H_

#include <functional>

#include "torch/torch.h"

namespace dcp {

/// Blocks until `device` has run everything queued on it (CUDA kernels and
/// copies run asynchronously); a no-op on the CPU. Thread-safe.
void SynchronizeDevice(const torch::Device& device);

/// What to call before each clock read that times work on `device`:
/// `injected` when set (tests record the order of waits and reads); else
/// SynchronizeDevice of a CUDA device; else (the CPU, where a call returns
/// when its work is done) an empty function, which callers skip.
std::function<void()> DeviceWaiter(const torch::Device& device,
                                   std::function<void()> injected = {});

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_DEVICE_SYNC_H_
