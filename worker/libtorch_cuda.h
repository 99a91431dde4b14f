#ifndef DCP_WORKER_LIBTORCH_CUDA_H_
#define DCP_WORKER_LIBTORCH_CUDA_H_

// DCP_LIBTORCH_HAS_CUDA, for the worker code that branches on it with #if:
// 1 when LibTorch is built with CUDA (--config=cuda), else 0. The define
// comes from @libtorch//:cuda with this header's library; a source that
// tests the macro includes this header, so that a missing define fails the
// compile instead of reading as 0. Also CudaUsable(): whether nccl can run
// here (a CUDA LibTorch and a visible GPU).

#ifndef DCP_LIBTORCH_HAS_CUDA
#error "DCP_LIBTORCH_HAS_CUDA is undefined: depend on //worker:libtorch_cuda"
#endif

#include "torch/cuda.h"

namespace dcp {

/// Whether this LibTorch has CUDA and a GPU is visible: where nccl can run.
/// Thread-safe.
inline bool CudaUsable() {
#if DCP_LIBTORCH_HAS_CUDA
  return torch::cuda::is_available();
#else
  return false;
#endif
}

}  // namespace dcp

#endif  // DCP_WORKER_LIBTORCH_CUDA_H_
