#ifndef DCP_COST_MODEL_MEMORY_MODEL_H_
#define DCP_COST_MODEL_MEMORY_MODEL_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/struct_fields.h"
#include "cost_model/model_spec.h"

namespace dcp {

/// Recompute level of a layer: keep all activations, recompute the attention
/// core and MLP activation only, or keep only the layer input.
enum class RecomputeLevel { kNone, kSelective, kFull };

/// GPU memory one NCCL communicator takes outside PyTorch's allocator on an
/// H200 (public reports give 0.5-0.7 GB; a prediction until measured).
/// Gloo (CPU) communicators cost no GPU memory.
inline constexpr double kNcclCommunicatorBytesH200 = 0.6e9;

/// The most SP sub-groups an NCCL worker keeps cached unless told otherwise
/// (dcp_worker --max-cached-groups). A plan puts each rank in one SP group
/// per step, and on an 8-GPU node a rank's groups of 2, 4 and 8 ranks are
/// one aligned block each: 3 communicators that every step may reuse, plus
/// one for the latest group that spans nodes. (1 + 4) x 0.6 GB = 3.0 GB,
/// 2.7% of an H200's 112.8 GB plan budget; a group evicted and used again
/// costs one NCCL communicator init.
inline constexpr int kDefaultNcclMaxCachedGroups = 4;

/// The c10d backend of a job's workers, for what its communicators cost.
enum class CommunicatorBackend { kGloo, kNccl };

/// Parameters of the per-GPU memory model (bytes).
struct MemoryParams {
  double weight_bytes_per_parameter = 2;      // bf16 weights
  double gradient_bytes_per_parameter = 4;    // fp32 gradient accumulation
  double optimizer_bytes_per_parameter = 12;  // fp32 master, Adam m and v
  /// ZeRO-1: optimizer states sharded over every rank (all ranks hold a full
  /// replica under Ulysses, so the data-parallel degree is the world size).
  bool zero1_optimizer_sharding = true;
  /// ZeRO-3 (FSDP2-style): weights, gradients and optimizer states all
  /// sharded over every rank (the optimizer states whatever
  /// zero1_optimizer_sharding says); each FSDP unit (a layer, the
  /// embedding, the head) is all-gathered for its forward and again for its
  /// backward and its gradients reduce-scattered after it, every
  /// micro-batch. A GPU then holds 1/world of the state plus the working
  /// set of two units gathered at once (the running one and the prefetched
  /// one), each with its weights and unsharded gradients.
  bool zero3_parameter_sharding = false;
  /// Fixed runtime bytes (allocator, workspaces) on top of the model state.
  double fixed_bytes = 0;
  /// Memory of one communicator (process group) a rank holds:
  /// kNcclCommunicatorBytesH200 for NCCL, 0 for Gloo.
  double communicator_bytes = 0;
  /// Communicators a rank holds at most: the world plus the SP groups the
  /// worker keeps cached (1 + its --max-cached-groups).
  int communicators_per_rank = 0;
  /// Per token per layer, no recompute.
  double activation_bytes_per_token_per_layer = 0;
  /// Per token per layer, selective recompute.
  double selective_bytes_per_token_per_layer = 0;
  /// Per token per layer, full recompute (the layer input).
  double checkpoint_bytes_per_token_per_layer = 0;
  /// Logits and loss buffers per token.
  double logits_bytes_per_token = 0;
  /// Transient bytes per token while a recomputed layer runs its backward
  /// (activation gradients and temporaries besides its rebuilt
  /// activations); defaults to the logits bytes.
  double backward_working_bytes_per_token = 0;
};

/// Every member of MemoryParams by its name: the field of
/// dcp.v1.MemoryParams that carries it (common/struct_fields.h).
inline constexpr StructField<MemoryParams> kMemoryParamsFields[] = {
    {"weight_bytes_per_parameter", &MemoryParams::weight_bytes_per_parameter},
    {"gradient_bytes_per_parameter",
     &MemoryParams::gradient_bytes_per_parameter},
    {"optimizer_bytes_per_parameter",
     &MemoryParams::optimizer_bytes_per_parameter},
    {"zero1_optimizer_sharding", &MemoryParams::zero1_optimizer_sharding},
    {"zero3_parameter_sharding", &MemoryParams::zero3_parameter_sharding},
    {"fixed_bytes", &MemoryParams::fixed_bytes},
    {"activation_bytes_per_token_per_layer",
     &MemoryParams::activation_bytes_per_token_per_layer},
    {"selective_bytes_per_token_per_layer",
     &MemoryParams::selective_bytes_per_token_per_layer},
    {"checkpoint_bytes_per_token_per_layer",
     &MemoryParams::checkpoint_bytes_per_token_per_layer},
    {"logits_bytes_per_token", &MemoryParams::logits_bytes_per_token},
    {"backward_working_bytes_per_token",
     &MemoryParams::backward_working_bytes_per_token},
    {"communicator_bytes", &MemoryParams::communicator_bytes},
    {"communicators_per_rank", &MemoryParams::communicators_per_rank},
};

/// Number format of training: kFp32 keeps weights, gradients and AdamW in
/// float32; kBf16 runs forward and backward in bfloat16 weights and
/// activations, accumulates gradients in float32 and keeps float32 master
/// weights with the AdamW states.
enum class TrainingPrecision { kFp32, kBf16 };

/// What of the training state is sharded over the ranks: nothing, the
/// optimizer states (ZeRO-1), or weights, gradients and optimizer states
/// (ZeRO-3 / FSDP2).
enum class ParameterSharding { kReplicated, kZero1, kZero3 };

/// The names the command lines and the planner protocol give them: "fp32"
/// and "bf16"; "none", "zero1" and "zero3". FromName gives nullopt for
/// any other name.
std::string_view TrainingPrecisionName(TrainingPrecision precision);
std::optional<TrainingPrecision> TrainingPrecisionFromName(
    std::string_view name);
std::string_view ParameterShardingName(ParameterSharding sharding);
std::optional<ParameterSharding> ParameterShardingFromName(
    std::string_view name);

/// Sets the weight, gradient and optimizer bytes per parameter and
/// zero1_optimizer_sharding to what the worker holds in `precision` with or
/// without ZeRO-1: bf16 is 2 + 4 + 12 (master, m, v); fp32 is 4 + 4 + 8 (m,
/// v; the weights are their own master), or 4 + 4 + 12 with ZeRO-1 (a
/// float32 master shard besides the full weights).
void SetTrainingStateBytes(TrainingPrecision precision, bool zero1,
                           MemoryParams& params);
/// The same for any sharding, also setting zero3_parameter_sharding: ZeRO-3
/// holds what ZeRO-1 does in bf16 (2 + 4 + 12), and in fp32 4 + 4 + 8 (the
/// float32 weight shard is its own master).
void SetTrainingStateBytes(TrainingPrecision precision,
                           ParameterSharding sharding, MemoryParams& params);

/// Sets communicator_bytes and communicators_per_rank for workers on
/// `backend` that keep at most `max_cached_groups` SP sub-groups cached
/// besides the world: 1 + max_cached_groups communicators of
/// kNcclCommunicatorBytesH200 on NCCL; on Gloo they cost no GPU memory
/// (0 bytes; any bound, 0 = unbounded, allowed).
void SetCommunicatorMemory(CommunicatorBackend backend, int max_cached_groups,
                           MemoryParams& params);

/// Defaults from the model's architecture (Korthikanti et al. 2022 with flash
/// attention). Predictions until fitted from profiles.
MemoryParams DefaultMemoryParams(const ModelSpec& model);

/// Peak bytes of one GPU running a micro-batch with the first k of n layers
/// checkpointed (pyramid activation checkpointing) on an SP group of a given
/// size: a group larger than the KV-head count stores replicated K and V
/// (ModelSpec::UlyssesKvCopies) in every layer that keeps its activations.
/// Immutable; thread-safe.
class MemoryModel {
 public:
  MemoryModel(const ModelSpec& model, const MemoryParams& params,
              int world_size)
      : num_layers_(model.num_layers),
        num_kv_heads_(model.num_kv_heads),
        kv_copy_bytes_per_token_per_layer_(model.KvCopyBytesPerTokenPerLayer()),
        parameters_(static_cast<double>(model.ParameterCount())),
        largest_unit_parameters_(
            static_cast<double>(LargestShardingUnit(model))),
        params_(params),
        world_size_(world_size) {}

  /// Parameters of the largest unit ZeRO-3 gathers at once: a layer, or the
  /// embedding or the head (vocab x hidden, the head with the final norm).
  static int64_t LargestShardingUnit(const ModelSpec& model);

  /// Weights, gradients, optimizer states, communicators and fixed bytes.
  /// With ZeRO-3 the state is (weights + gradients + optimizer states) /
  /// world plus ShardingWorkingSetBytes().
  double StaticBytes() const;
  /// The part of the model state sharded over the world, summed over every
  /// GPU (one GPU holds this / world): ZeRO-3's weights, gradients and
  /// optimizer states, ZeRO-1's optimizer states, or nothing. StaticBytes()
  /// is the rest, which no GPU count shrinks, plus this / world.
  double ShardedStateBytes() const;
  /// ZeRO-3's gathered working set: two of the largest units' weights and
  /// unsharded gradients (the running unit and the prefetched one); 0
  /// without ZeRO-3.
  double ShardingWorkingSetBytes() const;
  /// Bytes per token per layer at a recompute level (one copy of KV heads).
  double BytesPerTokenPerLayer(RecomputeLevel level) const;
  /// Bytes per token a layer that keeps all its activations stores on an SP
  /// group of `sp_size`: the fitted figure plus the extra KV-head copies.
  double StoredBytesPerTokenPerLayer(int sp_size) const;
  /// The most activation bytes per token held at once during a micro-batch
  /// on an SP group of `sp_size` with its first k = `checkpointed_layers`
  /// layers fully recomputed (the others keep all). Backward runs from the
  /// last layer, so the peak is the larger of the end of the forward pass
  /// (k checkpoints, n - k layers' activations and the logits) and the
  /// recompute of layer k, when the stored layers are freed (k checkpoints,
  /// one layer's rebuilt activations and the backward's working set).
  double ActivationBytesPerToken(int checkpointed_layers, int sp_size) const;
  /// Static bytes plus activations of `tokens_per_rank` tokens.
  double PeakBytes(int64_t tokens_per_rank, int checkpointed_layers,
                   int sp_size) const;
  /// The most tokens per rank that fit `budget_bytes` at that setting
  /// (0 if even the static bytes do not fit).
  int64_t MaxTokensPerRank(int checkpointed_layers, int sp_size,
                           double budget_bytes) const;
  /// The fewest checkpointed layers that make the micro-batch fit, or nullopt
  /// when even full recompute does not.
  std::optional<int> MinCheckpointedLayers(int64_t tokens_per_rank, int sp_size,
                                           double budget_bytes) const;

  int num_layers() const { return num_layers_; }
  const MemoryParams& params() const { return params_; }

 private:
  int num_layers_;
  int num_kv_heads_;
  double kv_copy_bytes_per_token_per_layer_;
  double parameters_;
  double largest_unit_parameters_;
  MemoryParams params_;
  int world_size_;
};

}  // namespace dcp

#endif  // DCP_COST_MODEL_MEMORY_MODEL_H_
