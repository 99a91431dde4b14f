#include "worker/execution/attention_kernel.h"

namespace dcp {
namespace {

// PyTorch's flash attention (FlashAttention-2): Ampere or newer, head
// dimensions that are multiples of 8 up to 256.
constexpr int kFlashMinComputeCapability = 8;
constexpr int64_t kFlashMaxHeadDim = 256;
constexpr int64_t kFlashHeadDimMultiple = 8;

}  // namespace

AttentionKernel ChooseAttentionKernel(const AttentionDevice& device,
                                      bool half_precision, int64_t head_dim) {
  if (!device.cuda) return AttentionKernel::kPerSequence;
  const bool flash_shape = head_dim > 0 && head_dim <= kFlashMaxHeadDim &&
                           head_dim % kFlashHeadDimMultiple == 0;
  if (half_precision && flash_shape &&
      device.compute_capability_major >= kFlashMinComputeCapability) {
    return AttentionKernel::kVarlenFlash;
  }
  return AttentionKernel::kPerSequenceFusedGqa;
}

const char* AttentionKernelName(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kPerSequence:
      return "per-sequence";
    case AttentionKernel::kPerSequenceFusedGqa:
      return "per-sequence-fused-gqa";
    case AttentionKernel::kVarlenFlash:
      return "varlen-flash";
  }
  return "unknown";
}

}  // namespace dcp
