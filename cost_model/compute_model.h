#ifndef DCP_COST_MODEL_COMPUTE_MODEL_H_
#define DCP_COST_MODEL_COMPUTE_MODEL_H_

#include "common/struct_fields.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/micro_batch_shape.h"
#include "cost_model/model_spec.h"

namespace dcp {

/// Parameters of the compute-time model. Each efficiency curve rises with
/// work size: time = flops / rate * (1 + half / size), i.e. the rate reaches
/// half its asymptote at `half` (tokens for GEMMs, sequence length for
/// attention). The form is linear in (1/rate, half/rate), so it is fitted by
/// least squares (see fitting.h).
struct ComputeParams {
  /// Asymptotic GEMM rate for the model's layer shapes.
  double gemm_flops_per_second = 0;
  /// Tokens per rank at which a layer's GEMMs run at half that rate.
  double gemm_half_efficiency_tokens = 0;
  /// Fixed cost of one layer's forward (kernel launches, small ops).
  double layer_fixed_seconds = 0;
  /// Flash-attention forward: asymptotic rate and half-efficiency length.
  double attention_forward_flops_per_second = 0;
  double attention_forward_half_length_tokens = 0;
  /// Flash-attention backward (2.5x the forward FLOPs).
  double attention_backward_flops_per_second = 0;
  double attention_backward_half_length_tokens = 0;
  /// Memory-bound element-wise ops (norms, rotary, residuals, activations).
  double elementwise_bytes_per_second = 0;
  /// Fixed cost of one micro-batch beyond its layers: embedding, loss,
  /// autograd set-up, the packing of its inputs (FitCostModel fits it from
  /// whole micro-batches, kMicroBatch samples).
  double micro_batch_fixed_seconds = 0;
  /// Fixed cost of one sequence in one layer pass (forward, backward or
  /// recompute): the attention runs per sequence, so its calls and small ops
  /// are paid once per sequence per pass.
  double sequence_layer_fixed_seconds = 0;
  /// Fixed cost of one layer pass of a micro-batch whose SP group has two or
  /// more ranks, beyond its all-to-alls: the head-sharded layout around them
  /// (packing Q, K and V, the copies each way) and the exchange's autograd
  /// nodes, paid on every rank outside the collectives (FitCostModel fits it
  /// from whole micro-batches at SP >= 2, kSpMicroBatch samples).
  double ulysses_layer_fixed_seconds = 0;
  /// Multiplies the compute (not the all-to-all) seconds of a micro-batch
  /// whose SP group has two or more ranks. 1 from the profile fit; the
  /// planner's online refit sets it when the micro-batches at SP >= 2 run
  /// slower or faster against the model than those at SP 1 (a rank's
  /// compute beside exchanges is not the compute of a rank alone).
  double sp_compute_scale = 1;
  /// The optimizer step (AdamW over this rank's parameters) at the end of a
  /// step.
  double optimizer_step_seconds = 0;
};

/// Every member of ComputeParams by its name: the field of
/// dcp.v1.ComputeParams that carries it (common/struct_fields.h).
inline constexpr StructField<ComputeParams> kComputeParamsFields[] = {
    {"gemm_flops_per_second", &ComputeParams::gemm_flops_per_second},
    {"gemm_half_efficiency_tokens",
     &ComputeParams::gemm_half_efficiency_tokens},
    {"layer_fixed_seconds", &ComputeParams::layer_fixed_seconds},
    {"attention_forward_flops_per_second",
     &ComputeParams::attention_forward_flops_per_second},
    {"attention_forward_half_length_tokens",
     &ComputeParams::attention_forward_half_length_tokens},
    {"attention_backward_flops_per_second",
     &ComputeParams::attention_backward_flops_per_second},
    {"attention_backward_half_length_tokens",
     &ComputeParams::attention_backward_half_length_tokens},
    {"elementwise_bytes_per_second",
     &ComputeParams::elementwise_bytes_per_second},
    {"micro_batch_fixed_seconds", &ComputeParams::micro_batch_fixed_seconds},
    {"sequence_layer_fixed_seconds",
     &ComputeParams::sequence_layer_fixed_seconds},
    {"ulysses_layer_fixed_seconds",
     &ComputeParams::ulysses_layer_fixed_seconds},
    {"sp_compute_scale", &ComputeParams::sp_compute_scale},
    {"optimizer_step_seconds", &ComputeParams::optimizer_step_seconds},
};

/// Defaults from public figures: GEMM rate from the cluster spec, attention
/// curves fitted to the FlashAttention-3 H100 table (causal or not as the
/// model is). Predictions, not measurements.
ComputeParams DefaultComputeParams(const ModelSpec& model,
                                   const ClusterSpec& cluster);

/// Scales the time of the GEMMs and element-wise ops by `linear_factor` and
/// that of attention by `attention_factor` (divides their rates).
void ScaleOpTimes(double linear_factor, double attention_factor,
                  ComputeParams& params);

/// Per-rank compute seconds of one transformer layer (and the LM head) for a
/// micro-batch. Immutable after construction; thread-safe.
class ComputeModel {
 public:
  /// Backward GEMMs do twice the forward FLOPs; flash attention backward
  /// 2.5 times.
  static constexpr double kBackwardGemmFactor = 2.0;
  static constexpr double kBackwardAttentionFactor = 2.5;

  ComputeModel(const ModelSpec& model, const ComputeParams& params)
      : model_(model), params_(params) {}

  /// Seconds of a GEMM of `flops` over `tokens` rows at forward efficiency.
  double GemmSeconds(double flops, double tokens) const;
  /// Seconds of flash attention on one rank, given the FLOPs proportional to
  /// sum L^2 and the matching term proportional to sum L.
  double AttentionForwardSeconds(double quadratic_flops,
                                 double linear_flops) const;
  double AttentionBackwardSeconds(double quadratic_flops,
                                  double linear_flops) const;

  /// One layer's forward on one rank of the group.
  double LayerForwardSeconds(const MicroBatchShape& shape) const;
  /// One layer's backward on one rank of the group.
  double LayerBackwardSeconds(const MicroBatchShape& shape) const;
  /// LM head forward + backward on one rank (0 without a vocabulary).
  double HeadSeconds(const MicroBatchShape& shape) const;
  /// The per-sequence fixed cost of one layer pass of this micro-batch.
  double SequencesLayerPassSeconds(const MicroBatchShape& shape) const {
    return params_.sequence_layer_fixed_seconds * shape.num_sequences;
  }

  const ComputeParams& params() const { return params_; }

 private:
  ModelSpec model_;
  ComputeParams params_;
};

}  // namespace dcp

#endif  // DCP_COST_MODEL_COMPUTE_MODEL_H_
