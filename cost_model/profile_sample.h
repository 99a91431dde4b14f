// A micro-benchmark measurement a worker takes for the cost model's fit, and
// the check that it is well formed.

#ifndef DCP_COST_MODEL_PROFILE_SAMPLE_H_
#define DCP_COST_MODEL_PROFILE_SAMPLE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "cost_model/micro_batch_shape.h"

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

/// OK when `sample` (the `index`-th of its profile) is well formed for a
/// model of `num_layers` layers: every value finite and non-negative, and
/// what its op needs present (a GEMM's FLOPs and tokens, a collective's
/// group of at least 2, a memory sample's checkpointed layers in
/// [0, num_layers], ...). Errors: InvalidArgument naming the sample's index,
/// op and field, and what the field must be.
absl::Status ValidateProfileSample(const ProfileSample& sample, size_t index,
                                   int num_layers);

}  // namespace dcp

#endif  // DCP_COST_MODEL_PROFILE_SAMPLE_H_
