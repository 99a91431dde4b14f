// Fitting the cost model's parameters to micro-benchmark profiles.
//
// Every sub-model of the cost model is linear in its parameters once written
// in the right form (e.g. a GEMM takes flops/P * (1 + n_half/tokens) seconds,
// linear in 1/P and n_half/P), so each is fitted by relative-error weighted
// least squares (least_squares.h). A sub-model without enough good samples
// keeps the caller's defaults and says so in its report.

#ifndef DCP_COST_MODEL_FITTING_H_
#define DCP_COST_MODEL_FITTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/micro_batch_shape.h"
#include "cost_model/model_spec.h"

namespace dcp {

/// One micro-benchmark measurement taken by a worker (mirrors
/// dcp.v1.ProfileSample in proto/dcp/v1/profile.proto). Plain value.
struct ProfileSample {
  enum class Op {
    kGemm,
    kAttentionForward,
    kAttentionBackward,
    kAllToAll,
    kAllReduce,
    kActivationMemory,
    /// ZeRO-1's collectives over the world: the gradients' reduce-scatter
    /// and the updated weights' all-gather.
    kReduceScatter,
    kAllGather,
    /// A whole micro-batch's forward and backward on one rank (SP 1), as
    /// the plan executor runs it (micro_batch_fit.h).
    kMicroBatch,
    /// The optimizer step over every parameter of the model on one rank.
    kOptimizerStep,
    /// A whole micro-batch's forward and backward on one rank of an SP
    /// group of group_size >= 2 (Ulysses attention), as the plan executor
    /// runs it: measured_seconds the whole, communication_seconds the part
    /// inside its all-to-alls (sp_micro_batch_fit.h).
    kSpMicroBatch,
  };
  Op op = Op::kGemm;
  /// GEMM: its FLOPs. Attention: the FLOPs proportional to sum L^2, as the
  /// forward counts them (for backward samples too; the fit applies
  /// ComputeModel::kBackwardAttentionFactor).
  double flops = 0;
  /// GEMM: rows (tokens per rank). Memory and micro-batches: tokens per rank
  /// (at SP >= 2 the rank's share, sum of ceil(length / group_size)).
  double tokens = 0;
  /// Attention: sum over sequences of length^2.
  double sum_squared_lengths = 0;
  /// Attention: sum over sequences of length.
  double sum_lengths = 0;
  /// Micro-batches: its sequences (at least 1), whole lengths in
  /// sum_lengths and sum_squared_lengths.
  int num_sequences = 0;
  /// Collectives and SP micro-batches: ranks taking part (at least 2).
  int group_size = 1;
  /// Collectives: the group crosses nodes.
  bool inter_node = false;
  /// All-to-all: bytes each rank holds; all-reduce: buffer bytes;
  /// reduce-scatter and all-gather: bytes of the whole (unsharded) buffer.
  double bytes = 0;
  /// Memory and micro-batch: fully recomputed layers (0..num_layers).
  int checkpointed_layers = 0;
  /// Time samples: measured seconds (positive).
  double measured_seconds = 0;
  /// Memory samples: measured peak bytes (positive).
  double measured_bytes = 0;
  /// SP micro-batches: the seconds of measured_seconds spent inside the
  /// all-to-alls (0 <= communication_seconds <= measured_seconds).
  double communication_seconds = 0;
};

/// A kMicroBatch sample of a micro-batch of `shape` (SP 1) with
/// `checkpointed_layers` recomputed that took `measured_seconds`.
ProfileSample MicroBatchSample(const MicroBatchShape& shape,
                               int checkpointed_layers,
                               double measured_seconds);

/// The shape of a kMicroBatch (SP 1) or kSpMicroBatch (SP group_size)
/// sample's micro-batch.
MicroBatchShape ShapeOfMicroBatchSample(const ProfileSample& sample);

/// A kSpMicroBatch sample: a micro-batch of `shape` (sp_size >= 2) on a group
/// that spans nodes or not, `checkpointed_layers` recomputed, that took
/// `measured_seconds` on one rank, `communication_seconds` of them inside
/// its all-to-alls.
ProfileSample SpMicroBatchSample(const MicroBatchShape& shape, bool inter_node,
                                 int checkpointed_layers,
                                 double measured_seconds,
                                 double communication_seconds);

/// The op's name in messages and reports: "gemm", "attention_forward",
/// "attention_backward", "all_to_all", "all_reduce", "activation_memory",
/// "reduce_scatter", "all_gather", "micro_batch", "optimizer_step",
/// "sp_micro_batch".
const char* ProfileOpName(ProfileSample::Op op);

/// How one sub-model's fit went.
struct ModelFitReport {
  /// "gemm", "attention_forward", "attention_backward", "all_to_all_intra",
  /// "all_to_all_inter", "all_reduce_intra", "all_reduce_inter",
  /// "activation_memory", "reduce_scatter_intra", "reduce_scatter_inter",
  /// "all_gather_intra", "all_gather_inter", "micro_batch",
  /// "optimizer_step", "sp_micro_batch".
  std::string name;
  /// Samples of this sub-model that were given.
  int num_samples = 0;
  /// Relative error of the fitted sub-model against its samples' measured
  /// values (0 when the defaults were kept).
  double rms_relative_error = 0;
  double max_relative_error = 0;
  /// Leave-one-out error: each sample predicted by the fit of the others
  /// (rms over `held_out_samples`; 0 samples when not computed).
  double held_out_rms_relative_error = 0;
  int held_out_samples = 0;
  /// True when the defaults were kept; `note` says why.
  bool used_defaults = true;
  std::string note;
};

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
/// last, over everything else (sp_micro_batch_fit.h). A sub-model with fewer than twice as many samples
/// as parameters, a failed solve or a non-physical result keeps its defaults.
/// Memory samples are taken to come from a run on every GPU of `cluster`
/// (the world size sets the ZeRO-1 optimizer shard); their peak bytes are
/// fitted as static bytes plus tokens times
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

/// The samples `truth` would produce, for tests and demos: GEMMs over a range
/// of token counts, attention forward/backward over a range of lengths,
/// all-to-all and all-reduce over group sizes 2..gpus_per_node inside a node
/// (and multiples of gpus_per_node across nodes when num_nodes > 1),
/// reduce-scatter and all-gather over those groups too,
/// activation memory at several token counts and checkpointed layers,
/// whole micro-batches at SP 1 (1 to 16 sequences of 32 to 512 tokens, with
/// and without recompute) and over the collectives' groups (SP micro-batches,
/// the same shapes), and the optimizer step. Each
/// measured value is multiplied by max(1 + relative_noise * z, 0.01), z a
/// standard normal drawn from std::mt19937_64(seed). Deterministic.
std::vector<ProfileSample> SyntheticProfile(const CostModel& truth,
                                            uint64_t seed,
                                            double relative_noise);

}  // namespace dcp

#endif  // DCP_COST_MODEL_FITTING_H_
