// Fitting the fixed costs of whole micro-batches and of the optimizer step.
//
// The op-level profile (GEMMs, attention, collectives) misses what a real
// micro-batch pays on top of its operations: the embedding, the loss, the
// element-wise ops, autograd's bookkeeping, one attention call per sequence
// per layer pass. Whole micro-batches, timed as the plan executor runs them,
// show it. Their measured seconds are fitted as
//
//   measured = s * work + s_q * quadratic + a + b * passes
//              + c * sequences * passes
//
// where `quadratic` is the compute model's op-level time of the micro-batch's
// attention FLOPs at the attention's asymptotic rate, and `work` the rest of
// its op-level time (GEMMs, element-wise ops, LM head, and the attention's
// half-efficiency term, linear in each sequence's length), at the rates
// fitted from the op samples and without fixed costs; passes = 2 *
// num_layers + checkpointed_layers (forward, backward, recompute). s scales
// the op rates to the real model's; a is
// ComputeParams::micro_batch_fixed_seconds, b
// ComputeParams::layer_fixed_seconds and c
// ComputeParams::sequence_layer_fixed_seconds. Linear in the coefficients,
// solved by relative-error least squares; a fixed term that comes out negative
// is held at zero and the rest refitted.
//
// s_q is fitted on its own only where that predicts held-out samples at
// least 20% better than s_q = s (one scale for all the work): on the CPU job
// the op samples' attention curve leans on its shortest lengths (per-call
// costs), and one scale under-predicted the profile's 512- and 1,024-token
// micro-batches by 1.5x (rms 18% over the micro-batch samples, 8-10% with
// s_q). The attention's rates are then divided by s_q and its half-efficiency
// lengths multiplied by s / s_q (the linear term keeps scale s).

#ifndef DCP_COST_MODEL_MICRO_BATCH_FIT_H_
#define DCP_COST_MODEL_MICRO_BATCH_FIT_H_

#include <vector>

#include "cost_model/compute_model.h"
#include "cost_model/model_fit_report.h"
#include "cost_model/model_spec.h"
#include "cost_model/profile_sample.h"

namespace dcp {

/// The compute model's op-level seconds of a micro-batch of `shape` with
/// `checkpointed_layers` recomputed, at `params`' rates and without any
/// fixed cost: outside the attention, and the attention's two terms.
struct MicroBatchWork {
  double outside_attention = 0;
  /// The attention's FLOPs at its asymptotic rate, and what its
  /// half-efficiency length adds (linear in each sequence's length).
  double attention_quadratic = 0;
  double attention_linear = 0;
};
MicroBatchWork MicroBatchWorkParts(const ModelSpec& model,
                                   const ComputeParams& params,
                                   const MicroBatchShape& shape,
                                   int checkpointed_layers);
/// Their sum.
double MicroBatchWorkSeconds(const ModelSpec& model,
                             const ComputeParams& params,
                             const MicroBatchShape& shape,
                             int checkpointed_layers);

/// Fits the kMicroBatch samples (all at SP 1) into `compute` (whose rates
/// must already be fitted from the op samples): on success scales its rates
/// as above and sets the three fixed terms. Needs at least 8 samples, at two
/// or more checkpointed-layer counts and sequence counts; otherwise, or when
/// the fit is not physical (s <= 0), `compute` is left as it is and the
/// report says why. The report carries the leave-one-out (held-out) error
/// as well as the error on the fitted samples.
ModelFitReport FitMicroBatches(const ModelSpec& model,
                               const std::vector<ProfileSample>& samples,
                               ComputeParams& compute);

/// Sets compute.optimizer_step_seconds to the median of the kOptimizerStep
/// samples (needs at least one).
ModelFitReport FitOptimizerStep(const std::vector<ProfileSample>& samples,
                                ComputeParams& compute);

}  // namespace dcp

#endif  // DCP_COST_MODEL_MICRO_BATCH_FIT_H_
