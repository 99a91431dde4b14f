// Fitting the activation-memory sub-model of the cost model to measured peak
// bytes (kActivationMemory samples).

#ifndef DCP_COST_MODEL_ACTIVATION_MEMORY_FIT_H_
#define DCP_COST_MODEL_ACTIVATION_MEMORY_FIT_H_

#include <vector>

#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_fit_report.h"
#include "cost_model/model_spec.h"
#include "cost_model/profile_sample.h"

namespace dcp {

/// Fits the kActivationMemory `samples` (taken on one rank of a run on every
/// GPU of `cluster`) into `memory`: each sample's peak is the static bytes
/// plus tokens times MemoryModel::ActivationBytesPerToken(k), whose two
/// phases (end of forward; recompute of layer k) are each linear in the
/// parameters. Samples are assigned to the phase the candidate parameters
/// say dominates, the linear problem is solved, and the assignment repeated
/// until it is stable. Fits the fixed bytes, the activation bytes per token
/// per layer (the selective bytes keep `defaults`' saving under them), and
/// where the samples tell them apart the logits and backward working bytes
/// per token. The checkpoint bytes (a layer's input) are kept: together with
/// the activation and logits bytes they are determined only up to one
/// degree of freedom by the end-of-forward phase. With fewer than 8 samples,
/// samples at one token count, or samples only with or only without
/// recompute, `memory` is left as it is and the report
/// ("activation_memory") says why.
ModelFitReport FitActivationMemory(const ModelSpec& model,
                                   const ClusterSpec& cluster,
                                   const CostParams& defaults,
                                   const std::vector<ProfileSample>& samples,
                                   MemoryParams& memory);

}  // namespace dcp

#endif  // DCP_COST_MODEL_ACTIVATION_MEMORY_FIT_H_
