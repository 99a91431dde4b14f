// Fitting what a micro-batch pays for sequence parallelism beyond the
// collectives profiled alone, from whole micro-batches timed at SP >= 2
// (kSpMicroBatch samples).
//
// An all-to-all profiled back to back runs with its communication threads
// awake and its peers in step; inside a micro-batch each of the two
// exchanges per layer pass comes between compute, and the layout copies and
// autograd nodes around it run outside the collective. Two corrections,
// fitted after every other sub-model:
//
//  - the all-to-all in situ, for groups inside a node and across nodes
//    separately: each sample's time inside its all-to-alls is 2 * passes
//    calls of latency plus its bus bytes over the bandwidth; both are
//    refitted when the samples tell them apart
//    (AllToAllRefitAccumulator::Solve: 4 samples, a positive bandwidth),
//    else the latency alone, the bandwidth kept from the all-to-all
//    samples (SolveLatency);
//  - ComputeParams::ulysses_layer_fixed_seconds: each sample's time outside
//    its all-to-alls minus what the compute model predicts for it is u *
//    passes.
// The all-to-all by plain least squares: the samples are means over runs,
// and a step pays the sum of its exchanges, whose waits for the slowest
// rank of the group have a long tail, so the fit must predict the mean (a
// relative-error fit leans to the fast ones). u by relative-error least
// squares (held at 0 if negative): the small micro-batches, whose time is
// mostly fixed costs, weigh most.
//
// passes = 2 * num_layers + checkpointed_layers (forward, backward,
// recompute), as in micro_batch_fit.h.

#ifndef DCP_COST_MODEL_SP_MICRO_BATCH_FIT_H_
#define DCP_COST_MODEL_SP_MICRO_BATCH_FIT_H_

#include <vector>

#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_fit_report.h"
#include "cost_model/model_spec.h"
#include "cost_model/profile_sample.h"

namespace dcp {

/// Fits the kSpMicroBatch `samples` into `params` (every other sub-model
/// already fitted): the in-situ all-to-all latency (and bandwidth) of each
/// kind of group with at least 2 samples, and the Ulysses layer-pass fixed
/// cost from all of them (at least 2). With fewer, `params` is left as it
/// is and the report ("sp_micro_batch") says why. The report's errors are
/// of the whole micro-batch's predicted seconds against measured_seconds,
/// on the fitted samples and leave-one-out (each sample predicted by the
/// fit of the others).
ModelFitReport FitSpMicroBatches(const ModelSpec& model,
                                 const ClusterSpec& cluster,
                                 const std::vector<ProfileSample>& samples,
                                 CostParams& params);

}  // namespace dcp

#endif  // DCP_COST_MODEL_SP_MICRO_BATCH_FIT_H_
