// Fitting the cost model's parameters to micro-benchmark profiles.
//
// Every sub-model of the cost model is linear in its parameters once written
// in the right form (e.g. a GEMM takes flops/P * (1 + n_half/tokens) seconds,
// linear in 1/P and n_half/P), so each is fitted by relative-error weighted
// least squares (least_squares.h). A sub-model without enough good samples
// keeps the caller's defaults and says so in its report.
//
// Its users get the profile sample (profile_sample.h), the fit report
// (model_fit_report.h) and the synthetic profile (synthetic_profile.h)
// through this header too.

#ifndef DCP_COST_MODEL_FITTING_H_
#define DCP_COST_MODEL_FITTING_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_fit_report.h"
#include "cost_model/model_spec.h"
#include "cost_model/profile_sample.h"
#include "cost_model/synthetic_profile.h"

namespace dcp {

/// Fitted parameters and one report per sub-model, in the order listed in
/// ModelFitReport::name.
struct CostModelFit {
  CostParams params;
  std::vector<ModelFitReport> reports;
};

/// Fits each sub-model of the cost model of `model` on `cluster` to the
/// samples, starting from `defaults`. Parameters no sample informs
/// (per-parameter bytes, checkpoint bytes; without micro-batch samples the
/// fixed costs and the element-wise rate) are kept from `defaults`. The
/// micro-batch samples are fitted after the op samples, over the op rates
/// fitted from them (micro_batch_fit.h), and the SP micro-batch samples
/// last, over everything else (sp_micro_batch_fit.h). A sub-model with fewer
/// than twice as many samples as parameters, a failed solve or a non-physical
/// result keeps its defaults. Memory samples are taken to come from a run on
/// every GPU of `cluster` (the world size sets the ZeRO-1 optimizer shard);
/// their peak bytes are fitted as static bytes plus tokens times
/// MemoryModel::ActivationBytesPerToken(k), which gives the fixed bytes, the
/// activation bytes per token per layer, the logits bytes and the backward
/// working bytes per token (the checkpoint bytes, a layer's input, are
/// kept). That needs samples at two or more token counts and at k = 0 as
/// well as some k > 0 (else the terms cannot be told apart and the defaults
/// are kept).
///
/// Errors: InvalidArgument for an invalid spec, or for an invalid sample
/// (negative or non-finite value, group_size < 2 for a collective, zero
/// tokens, ...); the message names the sample index and the field.
absl::StatusOr<CostModelFit> FitCostModel(
    const ModelSpec& model, const ClusterSpec& cluster,
    const CostParams& defaults, absl::Span<const ProfileSample> samples);

}  // namespace dcp

#endif  // DCP_COST_MODEL_FITTING_H_
