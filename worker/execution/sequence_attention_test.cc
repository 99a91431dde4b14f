// SequenceAttention (fused scaled_dot_product_attention) against the
// materialised-scores reference, forward and gradients, causal and
// bidirectional, with grouped KV heads and padding; and its memory, measured
// with CpuAllocationMeter, stays linear in the sequence length.

#include "worker/execution/sequence_attention.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "gtest/gtest.h"
#include "torch/torch.h"
#include "worker/execution/cpu_allocation_meter.h"

namespace dcp {
namespace {

struct Inputs {
  torch::Tensor q, k, v, output_gradient;
};

Inputs RandomInputs(int64_t q_heads, int64_t kv_heads, int64_t tokens,
                    int64_t head_dim, torch::Dtype dtype, uint64_t seed) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto normal = [&](std::vector<int64_t> shape) {
    return torch::empty(shape).normal_(0.0, 1.0, generator).to(dtype);
  };
  return {normal({q_heads, tokens, head_dim}).requires_grad_(true),
          normal({kv_heads, tokens, head_dim}).requires_grad_(true),
          normal({kv_heads, tokens, head_dim}).requires_grad_(true),
          normal({q_heads, tokens, head_dim})};
}

struct OutputAndGrads {
  torch::Tensor output, dq, dk, dv;
};

template <typename Attention>
OutputAndGrads RunAttention(Attention attention, const Inputs& in,
                            int64_t real_tokens, bool causal) {
  for (const torch::Tensor& t : {in.q, in.k, in.v}) {
    t.mutable_grad() = torch::Tensor();
  }
  torch::Tensor output = attention(in.q, in.k, in.v, real_tokens, causal);
  torch::autograd::backward({output}, {in.output_gradient});
  return {output.detach(), in.q.grad(), in.k.grad(), in.v.grad()};
}

double MaxAbsDifference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64))
      .abs()
      .max()
      .item<double>();
}

class FusedMatchesReference
    : public ::testing::TestWithParam<std::tuple<bool, torch::Dtype>> {};

TEST_P(FusedMatchesReference, ForwardAndGradients) {
  const auto [causal, dtype] = GetParam();
  // fp32 agrees to rounding. bf16 keeps 8 mantissa bits (relative step
  // 2^-8 = 0.4%); both paths round their bf16 results (and the fused kernel
  // its blocked partial sums) to that grid, so outputs and gradients of
  // magnitude ~1 may differ by a few steps: 0.05 allows ~12.
  const double tolerance = dtype == torch::kFloat32 ? 2e-5 : 5e-2;
  // 4 query heads over 2 KV heads; 37 positions of which 29 are real.
  Inputs in = RandomInputs(/*q_heads=*/4, /*kv_heads=*/2, /*tokens=*/37,
                           /*head_dim=*/16, dtype, /*seed=*/11);
  OutputAndGrads fused =
      RunAttention(SequenceAttention, in, /*real_tokens=*/29, causal);
  OutputAndGrads reference =
      RunAttention(ReferenceSequenceAttention, in, /*real_tokens=*/29, causal);
  ASSERT_EQ(fused.output.sizes(), (std::vector<int64_t>{4, 37, 16}));
  EXPECT_EQ(fused.output.scalar_type(), dtype);
  EXPECT_LT(MaxAbsDifference(fused.output, reference.output), tolerance);
  EXPECT_LT(MaxAbsDifference(fused.dq, reference.dq), tolerance);
  EXPECT_LT(MaxAbsDifference(fused.dk, reference.dk), tolerance);
  EXPECT_LT(MaxAbsDifference(fused.dv, reference.dv), tolerance);
  // Padding rows are zero and padding keys get no gradient.
  EXPECT_EQ(fused.output.narrow(1, 29, 8).abs().max().item<double>(), 0);
  EXPECT_EQ(fused.dk.narrow(1, 29, 8).abs().max().item<double>(), 0);
  // The gradients are not trivially zero.
  EXPECT_GT(reference.dk.abs().max().item<double>(), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(
    CausalAndBidirectional, FusedMatchesReference,
    ::testing::Combine(::testing::Bool(),
                       ::testing::Values(torch::kFloat32, torch::kBFloat16)));

TEST(SequenceAttentionTest, CausalDiffersFromBidirectional) {
  Inputs in = RandomInputs(2, 2, 9, 8, torch::kFloat32, /*seed=*/3);
  torch::NoGradGuard no_grad;
  torch::Tensor causal = SequenceAttention(in.q, in.k, in.v, 9, true);
  torch::Tensor bidirectional = SequenceAttention(in.q, in.k, in.v, 9, false);
  // The last query sees every key either way; the first only itself.
  EXPECT_LT(
      MaxAbsDifference(causal.narrow(1, 8, 1), bidirectional.narrow(1, 8, 1)),
      1e-5);
  EXPECT_GT(
      MaxAbsDifference(causal.narrow(1, 0, 1), bidirectional.narrow(1, 0, 1)),
      1e-3);
  EXPECT_LT(MaxAbsDifference(causal.narrow(1, 0, 1), in.v.narrow(1, 0, 1)),
            1e-5);
}

TEST(SequenceAttentionTest, UsesTheFlashKernelNotTheMathFallback) {
  constexpr int64_t kFlashAttention = 1;  // at::SDPBackend::flash_attention
  for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (bool causal : {true, false}) {
      Inputs in = RandomInputs(4, 2, 64, 16, dtype, /*seed=*/5);
      EXPECT_EQ(SequenceAttentionBackend(in.q, in.k, in.v, 60, causal),
                kFlashAttention)
          << c10::toString(dtype) << (causal ? " causal" : " bidirectional");
    }
  }
}

// Peak bytes allocated (above what was held before) while running forward
// and backward of `attention` on `tokens` tokens.
template <typename Attention>
int64_t PeakBytesOfForwardBackward(Attention attention, int64_t tokens) {
  Inputs in = RandomInputs(/*q_heads=*/2, /*kv_heads=*/1, tokens,
                           /*head_dim=*/16, torch::kFloat32, /*seed=*/7);
  CpuAllocationMeter& meter = CpuAllocationMeter::Get();
  meter.Install();
  const int64_t before = meter.current_bytes();
  meter.ResetPeak();
  RunAttention(attention, in, tokens, /*causal=*/true);
  const int64_t peak = meter.peak_bytes() - before;
  meter.Uninstall();
  return peak;
}

TEST(SequenceAttentionTest, MemoryIsLinearInSequenceLength) {
  // The scores of 2 heads over 4096 tokens in float32 are 128 MiB.
  constexpr int64_t kTokens = 4096;
  const int64_t scores_bytes = 2 * kTokens * kTokens * 4;
  const int64_t fused = PeakBytesOfForwardBackward(SequenceAttention, kTokens);
  // Inputs, outputs and gradients are 2 * 4096 * 16 * 4 = 512 KiB each; the
  // kernel's blocks are constant in the length.
  EXPECT_GT(fused, 0);
  EXPECT_LT(fused, scores_bytes / 16) << "fused peak " << fused << " bytes";
  // The meter does see quadratic memory: the reference holds scores.
  const int64_t reference =
      PeakBytesOfForwardBackward(ReferenceSequenceAttention, kTokens / 4);
  std::printf(
      "peak bytes of forward + backward: fused at %lld tokens %lld; "
      "materialised reference at %lld tokens %lld\n",
      static_cast<long long>(kTokens), static_cast<long long>(fused),
      static_cast<long long>(kTokens / 4), static_cast<long long>(reference));
  EXPECT_GT(reference, scores_bytes / 16)
      << "reference peak " << reference << " bytes";
}

}  // namespace
}  // namespace dcp
