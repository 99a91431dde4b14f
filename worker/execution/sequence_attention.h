#ifndef DCP_WORKER_EXECUTION_SEQUENCE_ATTENTION_H_
#define DCP_WORKER_EXECUTION_SEQUENCE_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "torch/torch.h"
#include "worker/communication/sequence_parallel.h"

namespace dcp {

/// The models' attention core over one (gathered, full) sequence of this
/// rank's heads: q [q_heads, P, head_dim], k and v [kv_heads, P, head_dim]
/// (q_heads a multiple of kv_heads; each KV head serves q_heads / kv_heads
/// query heads, grouped-query attention). Only the first `real_tokens` (>= 1,
/// <= P) positions are real; the rest are padding. Each real query attends to
/// the real keys (with `causal`, only those at or before its own position):
/// softmax(q k^T / sqrt(head_dim)) v. Rows of padding queries are zero, and
/// padding never reaches a real row. Returns [q_heads, P, head_dim].
/// Differentiable.
///
/// Runs PyTorch's fused scaled_dot_product_attention on 4-D inputs (flash
/// attention on the CPU; on CUDA with enable_gqa, so grouped KV heads are
/// not copied), so memory is linear in P: the P x P scores are never
/// materialised. The profiler times this very function.
torch::Tensor SequenceAttention(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, int64_t real_tokens,
                                bool causal);

/// Ulysses attention over one rank's shard of a packed micro-batch, as the
/// GPT's and the DiT's blocks run it: q [T, num_heads, head_dim] and k, v
/// [T, num_kv_heads, head_dim] of this rank's T tokens (each sequence's
/// slice_tokens[i] of them, its sequence_tokens[i] real tokens in all). KV
/// heads are replicated to lcm(num_kv_heads, sp size) when the group size
/// does not divide them; one all-to-all gathers every sequence's tokens for
/// this rank's heads, attention (causal or not) runs on the kernel
/// ChooseAttentionKernel picks (attention_kernel.h: on the CPU and on GPU
/// inputs flash cannot take, SequenceAttention per sequence; on a GPU in
/// half precision, one varlen flash-attention call over all the sequences),
/// and one all-to-all returns [T, num_heads * head_dim]. Differentiable.
torch::Tensor UlyssesAttention(torch::Tensor q, torch::Tensor k,
                               torch::Tensor v, int64_t num_heads,
                               int64_t num_kv_heads, int64_t head_dim,
                               const SequenceParallelContext& sp,
                               const std::vector<int64_t>& slice_tokens,
                               const std::vector<int64_t>& sequence_tokens,
                               bool causal);

/// What SequenceAttention computes, with the P x P score matrix materialised
/// (memory quadratic in P). A test reference only; same arguments and result.
torch::Tensor ReferenceSequenceAttention(const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const torch::Tensor& v,
                                         int64_t real_tokens, bool causal);

/// The at::SDPBackend (as its int value: 0 math, 1 flash attention, 2 memory
/// efficient, 3 cuDNN) that SequenceAttention's scaled_dot_product_attention
/// picks for these inputs. Lets tests check that the fused kernel, not the
/// quadratic math fallback, runs.
int64_t SequenceAttentionBackend(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, int64_t real_tokens,
                                 bool causal);

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_SEQUENCE_ATTENTION_H_
