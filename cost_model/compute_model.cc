#include "cost_model/compute_model.h"

#include <algorithm>

namespace dcp {

ComputeParams DefaultComputeParams(const ModelSpec& model,
                                   const ClusterSpec& cluster) {
  ComputeParams params;
  params.gemm_flops_per_second = cluster.gemm_flops_per_second;
  params.gemm_half_efficiency_tokens = 256;
  params.layer_fixed_seconds = 40e-6;
  // FA3 on H100, head dim 128 (../shared/H200-FACTS.md), fitted to
  // rate(L) = peak * L / (L + half): causal forward 292 TFLOP/s at 512 and
  // 616 at 16K; non-causal 467 and 648; backward 316 and 561.
  if (model.causal) {
    params.attention_forward_flops_per_second = 639e12;
    params.attention_forward_half_length_tokens = 608;
  } else {
    params.attention_forward_flops_per_second = 656e12;
    params.attention_forward_half_length_tokens = 208;
  }
  params.attention_backward_flops_per_second = 575e12;
  params.attention_backward_half_length_tokens = 420;
  params.elementwise_bytes_per_second = 0.8 * cluster.hbm_bytes_per_second;
  // On a GPU the launches of a micro-batch's own kernels (embedding, loss,
  // a few us each at CUDA's launch latency) overlap the previous work, and
  // layer_fixed_seconds above already counts each layer's launches; a
  // variable-length flash-attention kernel takes every sequence of a
  // micro-batch in one launch. So both default to 0 until a profile of
  // whole micro-batches fits them (the CPU job's are milliseconds: its
  // attention runs per sequence).
  params.micro_batch_fixed_seconds = 0;
  params.sequence_layer_fixed_seconds = 0;
  // The layout copies around the all-to-alls are element-wise kernels over
  // the bytes the exchange moves, their launches overlapped like the rest:
  // 0 until a profile of whole micro-batches at SP >= 2 fits it (on the CPU
  // job, autograd's nodes and the copies cost a few hundred us per pass).
  params.ulysses_layer_fixed_seconds = 0;
  // AdamW is memory bound: per parameter it reads and writes the fp32
  // weight and its two moments and reads the gradient (about 28 bytes), at
  // the element-wise rate (llama3-8b: about 60 ms without ZeRO-1).
  params.optimizer_step_seconds = 28.0 *
                                  static_cast<double>(model.ParameterCount()) /
                                  params.elementwise_bytes_per_second;
  return params;
}

void ScaleOpTimes(double linear_factor, double attention_factor,
                  ComputeParams& params) {
  params.gemm_flops_per_second /= linear_factor;
  params.elementwise_bytes_per_second /= linear_factor;
  params.attention_forward_flops_per_second /= attention_factor;
  params.attention_backward_flops_per_second /= attention_factor;
}

double ComputeModel::GemmSeconds(double flops, double tokens) const {
  if (flops <= 0 || tokens <= 0) return 0;
  return flops / params_.gemm_flops_per_second *
         (1.0 + params_.gemm_half_efficiency_tokens / tokens);
}

double ComputeModel::AttentionForwardSeconds(double quadratic_flops,
                                             double linear_flops) const {
  return (quadratic_flops +
          params_.attention_forward_half_length_tokens * linear_flops) /
         params_.attention_forward_flops_per_second;
}

double ComputeModel::AttentionBackwardSeconds(double quadratic_flops,
                                              double linear_flops) const {
  return (quadratic_flops +
          params_.attention_backward_half_length_tokens * linear_flops) /
         params_.attention_backward_flops_per_second;
}

namespace {

// Attention FLOPs one rank does: heads are split over the SP group, every
// rank sees whole sequences.
struct AttentionWork {
  double quadratic_flops;
  double linear_flops;
};

AttentionWork AttentionWorkPerRank(const ModelSpec& model,
                                   const MicroBatchShape& shape) {
  const double per_squared_token = model.AttentionForwardFlopsPerSquaredToken();
  return {per_squared_token * shape.sum_squared_lengths / shape.sp_size,
          per_squared_token * static_cast<double>(shape.sum_lengths) /
              shape.sp_size};
}

}  // namespace

double ComputeModel::LayerForwardSeconds(const MicroBatchShape& shape) const {
  if (shape.num_sequences == 0) return 0;
  const double tokens = static_cast<double>(shape.tokens_per_rank);
  const AttentionWork attention = AttentionWorkPerRank(model_, shape);
  return GemmSeconds(model_.LinearForwardFlopsPerToken() * tokens, tokens) +
         AttentionForwardSeconds(attention.quadratic_flops,
                                 attention.linear_flops) +
         model_.ElementwiseBytesPerTokenPerLayer() * tokens /
             params_.elementwise_bytes_per_second +
         params_.layer_fixed_seconds;
}

double ComputeModel::LayerBackwardSeconds(const MicroBatchShape& shape) const {
  if (shape.num_sequences == 0) return 0;
  const double tokens = static_cast<double>(shape.tokens_per_rank);
  const AttentionWork attention = AttentionWorkPerRank(model_, shape);
  return kBackwardGemmFactor *
             GemmSeconds(model_.LinearForwardFlopsPerToken() * tokens,
                         tokens) +
         AttentionBackwardSeconds(
             kBackwardAttentionFactor * attention.quadratic_flops,
             kBackwardAttentionFactor * attention.linear_flops) +
         2 * model_.ElementwiseBytesPerTokenPerLayer() * tokens /
             params_.elementwise_bytes_per_second +
         params_.layer_fixed_seconds;
}

double ComputeModel::HeadSeconds(const MicroBatchShape& shape) const {
  const double tokens = static_cast<double>(shape.tokens_per_rank);
  const double flops = model_.HeadForwardFlopsPerToken() * tokens;
  return (1 + kBackwardGemmFactor) * GemmSeconds(flops, tokens);
}

}  // namespace dcp
