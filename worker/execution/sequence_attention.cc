#include "worker/execution/sequence_attention.h"

#if DCP_LIBTORCH_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "worker/execution/attention_kernel.h"
#include "worker/libtorch_cuda.h"

namespace dcp {

namespace {

// k or v [kv_heads, P, d] repeated to [q_heads, P, d], each KV head serving
// q_heads / kv_heads consecutive query heads (a no-op without grouping).
torch::Tensor ExpandKvHeads(const torch::Tensor& kv, int64_t q_heads) {
  const int64_t group_size = q_heads / kv.size(0);
  if (group_size == 1) return kv;
  return kv.repeat_interleave(group_size, /*dim=*/0);
}

// Rows [real_tokens, P) of zeros appended to out [heads, real_tokens, d].
torch::Tensor PadRows(const torch::Tensor& out, int64_t padded_tokens) {
  const int64_t missing = padded_tokens - out.size(1);
  if (missing == 0) return out;
  return torch::constant_pad_nd(out, {0, 0, 0, missing});
}

// Where attention runs, for ChooseAttentionKernel.
AttentionDevice AttentionDeviceOf(const torch::Tensor& q) {
  AttentionDevice device;
#if DCP_LIBTORCH_HAS_CUDA
  if (q.is_cuda()) {
    device.cuda = true;
    device.compute_capability_major =
        at::cuda::getDeviceProperties(q.device().index())->major;
  }
#else
  device.cuda = q.is_cuda();
#endif
  return device;
}

bool IsHalfPrecision(torch::ScalarType dtype) {
  return dtype == torch::kBFloat16 || dtype == torch::kHalf;
}

// Whether SequenceAttention's fused kernel takes grouped KV heads itself
// (enable_gqa: any GPU kernel ChooseAttentionKernel picks); the CPU's does
// not, so there they are repeated.
bool KernelGroupsKvHeads(const torch::Tensor& q) {
  return ChooseAttentionKernel(AttentionDeviceOf(q),
                               IsHalfPrecision(q.scalar_type()),
                               q.size(-1)) != AttentionKernel::kPerSequence;
}

// The real rows of q, k and v as the 4-D [1, heads, L, d] that the fused
// kernels take (3-D inputs fall back to the math kernel), and whether the
// kernel groups the KV heads itself (else they are repeated here).
struct FusedInputs {
  torch::Tensor q, k, v;
  bool grouped_kv_heads = false;
};
FusedInputs RealRows(const torch::Tensor& q, const torch::Tensor& k,
                     const torch::Tensor& v, int64_t real_tokens) {
  TORCH_CHECK(real_tokens >= 1 && real_tokens <= q.size(1),
              "SequenceAttention: real_tokens ", real_tokens,
              " must be in [1, ", q.size(1), "]");
  TORCH_CHECK(q.size(0) % k.size(0) == 0, "SequenceAttention: ", q.size(0),
              " query heads are not a multiple of ", k.size(0), " KV heads");
  const int64_t q_heads = q.size(0);
  const bool grouped = KernelGroupsKvHeads(q);
  auto kv_rows = [&](const torch::Tensor& kv) {
    torch::Tensor rows = kv.narrow(1, 0, real_tokens);
    return (grouped ? rows : ExpandKvHeads(rows, q_heads)).unsqueeze(0);
  };
  return {q.narrow(1, 0, real_tokens).unsqueeze(0), kv_rows(k), kv_rows(v),
          grouped};
}

}  // namespace

torch::Tensor SequenceAttention(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, int64_t real_tokens,
                                bool causal) {
  FusedInputs in = RealRows(q, k, v, real_tokens);
  torch::Tensor out = at::scaled_dot_product_attention(
      in.q, in.k, in.v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
      /*is_causal=*/causal, /*scale=*/std::nullopt,
      /*enable_gqa=*/in.grouped_kv_heads);
  return PadRows(out.squeeze(0), q.size(1));
}

int64_t SequenceAttentionBackend(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, int64_t real_tokens,
                                 bool causal) {
  FusedInputs in = RealRows(q, k, v, real_tokens);
  return at::_fused_sdp_choice(in.q, in.k, in.v, /*attn_mask=*/{},
                               /*dropout_p=*/0.0, /*is_causal=*/causal,
                               /*scale=*/std::nullopt,
                               /*enable_gqa=*/in.grouped_kv_heads);
}

torch::Tensor ReferenceSequenceAttention(const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const torch::Tensor& v,
                                         int64_t real_tokens, bool causal) {
  FusedInputs in = RealRows(q, k, v, real_tokens);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores = torch::matmul(in.q, in.k.transpose(-2, -1)) * scale;
  if (causal) {
    torch::Tensor position =
        torch::arange(real_tokens, torch::kInt64).to(q.device());
    torch::Tensor later = position.unsqueeze(0) > position.unsqueeze(1);
    scores =
        scores.masked_fill(later, -std::numeric_limits<double>::infinity());
  }
  torch::Tensor probabilities = torch::softmax(scores, /*dim=*/-1);
  return PadRows(torch::matmul(probabilities, in.v).squeeze(0), q.size(1));
}

namespace {

// Sequence i of the gathered all-to-all result [s, T/s, w, d] (w: q + 2 kv
// heads), as its P_i = slice_tokens[i] * s positions in order: [P_i, w, d]
// (member major then slice order is position order). `offset` is its first
// slice token.
torch::Tensor GatheredSequence(const torch::Tensor& gathered, int64_t offset,
                               int64_t slice, int64_t s) {
  return gathered.narrow(1, offset, slice)
      .reshape({slice * s, gathered.size(2), gathered.size(3)});
}

// SequenceAttention over each gathered sequence in turn; each output is
// [s, slice_i, q_heads, d], member j's tokens first.
std::vector<torch::Tensor> PerSequenceAttention(
    const torch::Tensor& gathered, int64_t s, int64_t q_heads, int64_t kv_heads,
    const std::vector<int64_t>& slice_tokens,
    const std::vector<int64_t>& sequence_tokens, bool causal) {
  const int64_t head_dim = gathered.size(3);
  std::vector<torch::Tensor> outputs;
  outputs.reserve(slice_tokens.size());
  int64_t offset = 0;
  for (size_t i = 0; i < slice_tokens.size(); ++i) {
    const int64_t slice = slice_tokens[i];
    torch::Tensor sequence = GatheredSequence(gathered, offset, slice, s);
    torch::Tensor qs = sequence.narrow(1, 0, q_heads).transpose(0, 1);
    torch::Tensor ks = sequence.narrow(1, q_heads, kv_heads).transpose(0, 1);
    torch::Tensor vs =
        sequence.narrow(1, q_heads + kv_heads, kv_heads).transpose(0, 1);
    torch::Tensor out = SequenceAttention(qs, ks, vs, sequence_tokens[i],
                                          causal);  // [hq, P, d]
    outputs.push_back(
        out.transpose(0, 1).reshape({s, slice, q_heads, head_dim}));
    offset += slice;
  }
  return outputs;
}

// One varlen flash-attention call over the real tokens of every gathered
// sequence (padding dropped, cumulative lengths marking where each starts;
// KV heads grouped by the kernel), then each sequence's output padded back
// to [s, slice_i, q_heads, d] as PerSequenceAttention returns it. CUDA,
// half precision only (ChooseAttentionKernel).
std::vector<torch::Tensor> VarlenFlashAttention(
    const torch::Tensor& gathered, int64_t s, int64_t q_heads, int64_t kv_heads,
    const std::vector<int64_t>& slice_tokens,
    const std::vector<int64_t>& sequence_tokens, bool causal) {
  const int64_t head_dim = gathered.size(3);
  std::vector<torch::Tensor> real_rows;
  real_rows.reserve(slice_tokens.size());
  std::vector<int32_t> starts = {0};
  int64_t longest = 0;
  int64_t offset = 0;
  for (size_t i = 0; i < slice_tokens.size(); ++i) {
    real_rows.push_back(GatheredSequence(gathered, offset, slice_tokens[i], s)
                            .narrow(0, 0, sequence_tokens[i]));
    starts.push_back(starts.back() + static_cast<int32_t>(sequence_tokens[i]));
    longest = std::max(longest, sequence_tokens[i]);
    offset += slice_tokens[i];
  }
  torch::Tensor packed = torch::cat(real_rows, /*dim=*/0);  // [sum L, w, d]
  torch::Tensor cumulative =
      torch::tensor(starts, torch::kInt32).to(gathered.device());
  torch::Tensor out = std::get<0>(at::_flash_attention_forward(
      packed.narrow(1, 0, q_heads).contiguous(),
      packed.narrow(1, q_heads, kv_heads).contiguous(),
      packed.narrow(1, q_heads + kv_heads, kv_heads).contiguous(), cumulative,
      cumulative, longest, longest, /*dropout_p=*/0.0, /*is_causal=*/causal,
      /*return_debug_mask=*/false));  // [sum L, q_heads, d]
  std::vector<torch::Tensor> outputs;
  outputs.reserve(slice_tokens.size());
  for (size_t i = 0; i < slice_tokens.size(); ++i) {
    const int64_t padding = slice_tokens[i] * s - sequence_tokens[i];
    torch::Tensor rows = out.narrow(0, starts[i], sequence_tokens[i]);
    if (padding > 0) {
      rows = torch::constant_pad_nd(rows, {0, 0, 0, 0, 0, padding});
    }
    outputs.push_back(rows.reshape({s, slice_tokens[i], q_heads, head_dim}));
  }
  return outputs;
}

}  // namespace

torch::Tensor UlyssesAttention(torch::Tensor q, torch::Tensor k,
                               torch::Tensor v, int64_t num_heads,
                               int64_t num_kv_heads, int64_t head_dim,
                               const SequenceParallelContext& sp,
                               const std::vector<int64_t>& slice_tokens,
                               const std::vector<int64_t>& sequence_tokens,
                               bool causal) {
  const int64_t tokens = q.size(0);
  const int64_t s = sp.size();
  // KV heads must split evenly over the group: replicate them to
  // lcm(kv heads, s) when s does not divide their count.
  const int64_t kv_repeat = s / std::gcd(num_kv_heads, s);
  if (kv_repeat > 1) {
    k = k.repeat_interleave(kv_repeat, /*dim=*/1);
    v = v.repeat_interleave(kv_repeat, /*dim=*/1);
  }
  const int64_t local_q_heads = num_heads / s;
  const int64_t local_kv_heads = num_kv_heads * kv_repeat / s;

  // [T, s, q + 2 kv heads, d]: chunk j along dim 1 holds member j's heads.
  torch::Tensor packed =
      torch::cat({q.view({tokens, s, local_q_heads, head_dim}),
                  k.view({tokens, s, local_kv_heads, head_dim}),
                  v.view({tokens, s, local_kv_heads, head_dim})},
                 /*dim=*/2);
  // Sequence-sharded, all heads -> all tokens, local heads: chunk j of the
  // result is member j's tokens for this member's heads.
  torch::Tensor gathered =
      DifferentiableAllToAll(packed.permute({1, 0, 2, 3}).contiguous(), sp);

  const AttentionKernel kernel = ChooseAttentionKernel(
      AttentionDeviceOf(q), IsHalfPrecision(q.scalar_type()), head_dim);
  const std::vector<torch::Tensor> outputs =
      kernel == AttentionKernel::kVarlenFlash
          ? VarlenFlashAttention(gathered, s, local_q_heads, local_kv_heads,
                                 slice_tokens, sequence_tokens, causal)
          : PerSequenceAttention(gathered, s, local_q_heads, local_kv_heads,
                                 slice_tokens, sequence_tokens, causal);
  // All tokens, local heads -> local tokens, all heads: chunk j of the
  // result is this member's tokens for member j's heads.
  torch::Tensor local =
      DifferentiableAllToAll(torch::cat(outputs, /*dim=*/1).contiguous(), sp);
  return local.permute({1, 0, 2, 3}).reshape({tokens, num_heads * head_dim});
}

}  // namespace dcp
