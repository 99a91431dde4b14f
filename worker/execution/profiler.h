// Micro-benchmarks of a model's own operations, for fitting the cost model
// (cost_model/fitting.h) to the hardware a job actually runs on.

#ifndef DCP_WORKER_EXECUTION_PROFILER_H_
#define DCP_WORKER_EXECUTION_PROFILER_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "cost_model/fitting.h"
#include "cost_model/model_spec.h"
#include "torch/torch.h"
#include "worker/communication/communicator.h"

namespace dcp {

/// What RunProfile measures and how. The defaults are a quick CPU profile of
/// a small model (for the "tiny" preset on 2 cores: about 1 s on one rank,
/// 3-5 s with 4 ranks sharing them); a GPU profile of a real model wants
/// larger sizes (e.g. GEMMs of 512..16K tokens, attention of 512..16K
/// tokens, collectives of 1..256 MiB). An empty list skips that measurement.
/// Every rank must pass equal options (the collectives depend on them). Plain
/// value.
struct ProfileOptions {
  /// Timed runs per measurement; the sample is their median. At least 1.
  int repeats = 5;
  /// Untimed runs before them. At least 0.
  int warmup = 2;
  /// Rows of the GEMM samples (tokens per rank), each > 0. The smallest
  /// counts show the fixed per-call cost that the fit's half-efficiency
  /// term stands for; without them a CPU's flat rate may fit a (rejected)
  /// negative one.
  std::vector<int64_t> gemm_tokens = {1, 8, 64, 512, 2048};
  /// Lengths of the single sequences of the attention samples, each > 0
  /// (short ones for the same reason).
  std::vector<int64_t> attention_lengths = {32, 64, 128, 256, 512};
  /// Sequence-parallel group sizes of the all-to-all samples: each >= 2 and
  /// dividing the world size. nullopt: every power of two from 2 to the
  /// world size that divides it (none in a world of one).
  std::optional<std::vector<int>> group_sizes;
  /// Bytes each rank holds in the all-to-all samples, each > 0 (rounded
  /// down to whole elements, one equal chunk per member; the sample records
  /// the bytes actually sent).
  std::vector<int64_t> all_to_all_bytes = {64 << 10, 256 << 10, 1 << 20,
                                           4 << 20};
  /// Buffer bytes of the world all-reduce samples, each > 0 (rounded down to
  /// whole elements).
  std::vector<int64_t> all_reduce_bytes = {64 << 10, 256 << 10, 1 << 20,
                                           4 << 20};
  /// Bytes of the whole flat buffer of the world reduce-scatter (float32,
  /// as the gradients) and all-gather (`dtype`, as the weights) samples of
  /// ZeRO-1, each at least one float32 element per rank (rounded down to
  /// whole elements per rank).
  std::vector<int64_t> zero1_collective_bytes = {64 << 10, 256 << 10, 1 << 20,
                                                 4 << 20};
  /// Activation-memory samples (see RunProfile; memory_profiler.h): tokens
  /// per rank, each a positive multiple of memory_sequence_tokens, ...
  std::vector<int64_t> memory_tokens = {1024, 2048, 4096};
  /// ... packed as sequences of this many tokens ...
  int64_t memory_sequence_tokens = 512;
  /// ... at each of these checkpointed-layer counts, each in
  /// [0, num_layers]. nullopt: 0, 1 and num_layers.
  std::optional<std::vector<int>> memory_checkpointed_layers;
  /// Whole micro-batches (kMicroBatch samples, micro_batch_fit.h), timed
  /// as the plan executor runs them at SP 1: each {sequences, length} packs
  /// that many sequences of that many tokens, run at each of
  /// micro_batch_checkpointed_layers (nullopt: 0 and num_layers). None by
  /// default; the worker profiles DefaultMicroBatchProfileShapes().
  std::vector<std::pair<int, int64_t>> micro_batch_shapes;
  std::optional<std::vector<int>> micro_batch_checkpointed_layers;
  /// Whole micro-batches over each SP group of the all-to-all samples
  /// (kSpMicroBatch samples, cost_model/sp_micro_batch_fit.h), in the same
  /// form, at micro_batch_checkpointed_layers. None by default; the worker
  /// profiles DefaultSpMicroBatchProfileShapes().
  std::vector<std::pair<int, int64_t>> sp_micro_batch_shapes;
  /// Timed runs of each of them (at least 1): their samples are means, and
  /// the exchanges' waits have a long tail, so more than `repeats`.
  int sp_micro_batch_repeats = 10;
  /// Time the optimizer step (AdamW over the model's parameters, as the
  /// plan executor steps it): kOptimizerStep samples, one per timed run.
  /// Off by default; the worker turns it on.
  bool optimizer_step = false;
  /// Added to every measured activation peak: the model-state bytes the
  /// fit's memory model assumes (weights, gradients, optimizer shard; e.g.
  /// MemoryModel(model, defaults.memory, world).StaticBytes()), which a
  /// profiling process does not hold. 0 leaves the peak as measured.
  double memory_static_bytes = 0;
  /// Where the benchmarks run, and their element type (also of the
  /// collectives' buffers). CUDA needs a CUDA LibTorch.
  torch::Device device = torch::kCPU;
  torch::Dtype dtype = torch::kFloat32;
  /// Seeds the random inputs.
  uint64_t seed = 0;
  /// Timeout of each collective (and of creating a group). Positive, finite.
  absl::Duration collective_timeout = absl::Seconds(60);
};

/// The whole micro-batches the worker profiles: they cover the main job's
/// plans, short sequences many to a micro-batch and single long ones.
std::vector<std::pair<int, int64_t>> DefaultMicroBatchProfileShapes();

/// The micro-batches the worker profiles over each SP group: single short
/// sequences (a bucket plan's many small micro-batches) to packs of a few
/// thousand tokens.
std::vector<std::pair<int, int64_t>> DefaultSpMicroBatchProfileShapes();

/// Runs the micro-benchmarks of `model` on this rank and returns the samples
/// this rank measured, in the order below. Every measurement is the median
/// of `options.repeats` runs after `options.warmup` untimed runs, each timed
/// by reading `clock` exactly twice (before and after; on CUDA after
/// synchronising the device), and nowhere else.
///
/// Compute, on this rank alone:
///  - kGemm, per gemm_tokens T: the forward matrix multiplications of one
///    GptModel DecoderLayer (a DitBlock for a diffusion-transformer spec,
///    IsDiffusionTransformerSpec), run by the layer's own ProjectQkv,
///    ProjectOutput and Mlp on random [T, hidden] inputs (no autograd);
///    flops = model.LinearForwardFlopsPerToken() * T, tokens = T, the form
///    ComputeModel::GemmSeconds expects.
///  - kAttentionForward / kAttentionBackward, per attention_lengths L:
///    the models' own attention core (SequenceAttention over one sequence of
///    random Q, K, V, causal if model.causal, as the GPT and the DiT call
///    it) forward,
///    and its autograd backward (the forward untimed);
///    flops = model.AttentionForwardFlopsPerSquaredToken() * L^2 for both
///    (the fit applies the backward factor), sum_squared_lengths = L^2,
///    sum_lengths = L.
///  - kActivationMemory: ProfileActivationMemory (memory_profiler.h) of the
///    model the plan executor trains (GptModel or DitModel), over
///    memory_tokens (packed sequences of memory_sequence_tokens) at each
///    memory_checkpointed_layers: the peak allocated bytes of a forward and
///    backward above what was allocated before it, plus
///    memory_static_bytes; CUDA's allocator statistics on a GPU,
///    CpuAllocationMeter on the CPU. Not timed.
///  - kMicroBatch, per micro_batch_shapes and checkpointed-layer count: the
///    same model's ShardLossSum and backward at SP 1 (the gradients
///    accumulate, as in a step), timed whole;
///  - kOptimizerStep (optimizer_step): AdamW's step over that model's
///    parameters, one sample per timed run.
///
/// Collectives, with every rank of `comm` (the protocol: every rank must call
/// RunProfile with equal options, and each then runs exactly this sequence):
///  1. a world barrier (after this rank's compute benchmarks);
///  2. for each group size s, ascending: the ranks form consecutive blocks
///     [k*s, (k+1)*s) (Communicator::Group, created on first use), and each
///     block runs, for each all_to_all_bytes, warmup + repeats all-to-alls,
///     each preceded by an untimed barrier over the block; kAllToAll samples
///     with group_size = s, bytes = bytes per rank, inter_node = the block
///     spans more than one node of `gpus_per_node` ranks;
///  3. for each group size s again, over the same blocks: kSpMicroBatch
///     samples of sp_micro_batch_shapes (ProfileSpMicroBatches,
///     micro_batch_profiler.h), each run after an untimed barrier over the
///     block;
///  4. with two or more ranks, for each all_reduce_bytes: warmup + repeats
///     all-reduces over the world, each after a world barrier; kAllReduce
///     samples with group_size = world size; then for each
///     zero1_collective_bytes B: warmup + repeats reduce-scatters of a
///     float32 buffer of B bytes over the world, then as many all-gathers
///     into a `dtype` buffer of B bytes, each after a world barrier;
///     kReduceScatter and kAllGather samples with group_size = world size
///     and bytes = the whole buffer;
///  5. a world barrier.
/// Every rank of a block records the same collectives (timed from its own
/// point of view); which ranks' samples to submit (e.g. rank 0's, or all
/// for averaging) is the caller's choice. Compute samples are this rank's.
///
/// Errors: INVALID_ARGUMENT for options, or a model neither GptModel nor
/// DitModel can build (their CheckSpec), that are invalid (the message
/// names the field and the fix); FAILED_PRECONDITION for a CUDA device
/// without a CUDA LibTorch; INTERNAL when a benchmark throws or the clock
/// does not advance over a measurement (a non-positive median); a
/// collective's own error (e.g. DEADLINE_EXCEEDED when another rank is
/// missing), after which the caller should abandon `comm`.
///
/// Not thread-safe with respect to `comm` (it issues collectives on it).
absl::StatusOr<std::vector<ProfileSample>> RunProfile(
    const ModelSpec& model, Communicator& comm, int gpus_per_node,
    const ProfileOptions& options, const Clock& clock = RealClock::Get());

/// One block of RunProfile's collectives: the consecutive ranks
/// [k*s, (k+1)*s) holding this rank, for a group size s.
struct ProfileBlock {
  CommGroup* group = nullptr;
  /// The block spans more than one node of `gpus_per_node` ranks.
  bool inter_node = false;
};

/// This rank's block of `group_size` ranks (Communicator::Group, created on
/// first use); the group's error if it cannot be made.
absl::StatusOr<ProfileBlock> ProfileBlockOf(Communicator& comm, int group_size,
                                            int gpus_per_node);

/// The group sizes RunProfile measures all-to-alls over in a world of
/// `world_size` ranks: options.group_sizes sorted without repeats, else
/// every power of two from 2 to world_size that divides it.
/// INVALID_ARGUMENT for a size < 2 or not dividing world_size.
absl::StatusOr<std::vector<int>> ProfileGroupSizes(
    const ProfileOptions& options, int world_size);

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_PROFILER_H_
