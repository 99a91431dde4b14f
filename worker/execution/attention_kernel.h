// Which attention kernel a micro-batch's packed sequences run on.

#ifndef DCP_WORKER_EXECUTION_ATTENTION_KERNEL_H_
#define DCP_WORKER_EXECUTION_ATTENTION_KERNEL_H_

#include <cstdint>

namespace dcp {

enum class AttentionKernel {
  /// The CPU: scaled_dot_product_attention per sequence, its KV heads
  /// repeated for grouped queries (the CPU's fused kernel takes no GQA).
  kPerSequence,
  /// A GPU without flash attention for these inputs (float32, a head
  /// dimension flash does not take, an older GPU): 4-D
  /// scaled_dot_product_attention per sequence with enable_gqa, so that the
  /// memory-efficient (or cuDNN) kernel runs and KV heads are not copied.
  kPerSequenceFusedGqa,
  /// A GPU with flash attention: one varlen flash-attention call over every
  /// sequence of the micro-batch (cumulative lengths, no padding, grouped
  /// KV heads natively): one launch however many short sequences it holds.
  kVarlenFlash,
};

/// What the attention runs on.
struct AttentionDevice {
  bool cuda = false;
  /// The GPU's compute capability major (8 Ampere, 9 Hopper); 0 on the CPU.
  int compute_capability_major = 0;
};

/// The kernel for attention on `device` over inputs of `head_dim` whose
/// dtype is half precision (bfloat16/float16) or not: varlen flash on a GPU
/// of compute capability >= 8 with half precision and a head dimension that
/// is a multiple of 8 up to 256 (what PyTorch's flash attention takes);
/// per-sequence fused GQA on any other GPU input; per-sequence on the CPU.
/// Pure; thread-safe.
AttentionKernel ChooseAttentionKernel(const AttentionDevice& device,
                                      bool half_precision, int64_t head_dim);

/// "per-sequence", "per-sequence-fused-gqa" or "varlen-flash".
const char* AttentionKernelName(AttentionKernel kernel);

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_ATTENTION_KERNEL_H_
