// Fitting the fixed costs of whole micro-batches and of the optimizer step.
//
// The op-level profile (GEMMs, attention, collectives) misses what a real
// micro-batch pays on top of its operations: the embedding, the loss, the
// element-wise ops, autograd's bookkeeping, one attention call per sequence
// per layer pass. Whole micro-batches, timed as the plan executor runs them,
// show it. Their measured seconds are fitted as
//
//   measured = s * work + a + b * passes + c * sequences * passes
//
// where `work` is the compute model's op-level time of the micro-batch (its
// GEMMs, attention, element-wise ops and LM head at the rates fitted from the
// op samples, without fixed costs), passes = 2 * num_layers +
// checkpointed_layers (forward, backward, recompute), s scales the op rates
// to the real model's, a is ComputeParams::micro_batch_fixed_seconds, b
// ComputeParams::layer_fixed_seconds and c
// ComputeParams::sequence_layer_fixed_seconds. Linear in (s, a, b, c), solved
// by relative-error least squares; a fixed term that comes out negative is
// held at zero and the rest refitted.

#ifndef DCP_COST_MODEL_MICRO_BATCH_FIT_H_
#define DCP_COST_MODEL_MICRO_BATCH_FIT_H_

#include <vector>

#include "cost_model/compute_model.h"
#include "cost_model/fitting.h"
#include "cost_model/model_spec.h"

namespace dcp {

/// The compute model's op-level seconds of a micro-batch of `shape` with
/// `checkpointed_layers` recomputed, at `params`' rates and without any
/// fixed cost: the `work` column of the fit.
double MicroBatchWorkSeconds(const ModelSpec& model,
                             const ComputeParams& params,
                             const MicroBatchShape& shape,
                             int checkpointed_layers);

/// Fits the kMicroBatch samples (all at SP 1) into `compute` (whose rates
/// must already be fitted from the op samples): on success scales its rates
/// by 1/s and sets the three fixed terms. Needs at least 8 samples, at two
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
