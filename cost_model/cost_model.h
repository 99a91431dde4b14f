#ifndef DCP_COST_MODEL_COST_MODEL_H_
#define DCP_COST_MODEL_COST_MODEL_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/comm_model.h"
#include "cost_model/compute_model.h"
#include "cost_model/memory_model.h"
#include "cost_model/micro_batch_shape.h"
#include "cost_model/model_spec.h"

namespace dcp {

/// Every fitted parameter of the cost model.
struct CostParams {
  ComputeParams compute;
  MemoryParams memory;
  CommParams comm;
};

/// Public-figure defaults for this model on this cluster (predictions).
CostParams DefaultCostParams(const ModelSpec& model,
                             const ClusterSpec& cluster);

/// OK when every rate is finite and > 0 and every other parameter finite and
/// >= 0; otherwise INVALID_ARGUMENT naming the first bad field.
absl::Status ValidateCostParams(const CostParams& params);

/// The predicted cost of one micro-batch on one rank of its SP group.
struct MicroBatchCost {
  double forward_seconds = 0;
  /// Backward including its all-to-alls and any recomputation: the part that
  /// can overlap the step-end gradient all-reduce when it runs last.
  double backward_seconds = 0;
  double recompute_seconds = 0;
  /// All Ulysses all-to-alls (forward, backward, recompute).
  double communication_seconds = 0;
  /// ZeRO-3's collectives over the world, counted in the forward (one
  /// all-gather of the weights) and backward (another all-gather and the
  /// gradients' reduce-scatter); 0 without ZeRO-3.
  double sharding_seconds = 0;
  double total_seconds = 0;
  double peak_bytes = 0;
};

/// Compute, memory and communication models of one model on one cluster,
/// combined into micro-batch and step costs. Immutable; thread-safe.
class CostModel {
 public:
  /// Validates the specs and the params; errors name the bad field.
  static absl::StatusOr<CostModel> Create(const ModelSpec& model,
                                          const ClusterSpec& cluster,
                                          const CostParams& params);
  static absl::StatusOr<CostModel> CreateDefault(const ModelSpec& model,
                                                 const ClusterSpec& cluster);

  /// Time and peak memory of a micro-batch with the first
  /// `checkpointed_layers` layers recomputed. With ZeRO-3
  /// (memory.zero3_parameter_sharding) every micro-batch also pays
  /// ParameterAllGatherSeconds() in its forward and again in its backward,
  /// plus GradientReduceScatterSeconds(), as FSDP2 runs them by default
  /// (reshard after forward): a recomputed layer's forward runs inside its
  /// backward, on the weights gathered for it, so recompute adds none. The
  /// collectives are counted in full (no overlap with compute assumed), so
  /// fewer, larger micro-batches pay them less often.
  MicroBatchCost MicroBatch(const MicroBatchShape& shape,
                            int checkpointed_layers) const;
  /// ZeRO-3: one pass of all-gathers of the weights over every rank, one
  /// per FSDP unit (each layer, the embedding, the head with the final
  /// norm), in the weights' bytes, on the NICs when the world spans nodes;
  /// 0 without ZeRO-3.
  double ParameterAllGatherSeconds() const;
  /// ZeRO-3: the reduce-scatters of one micro-batch's gradients over every
  /// rank, one per unit, in the gradients' bytes; 0 without ZeRO-3.
  double GradientReduceScatterSeconds() const;
  /// ZeRO-3 (memory.zero3_parameter_sharding): weights, gradients and
  /// optimizer states sharded over every rank.
  bool ShardsParameters() const {
    return params_.memory.zero3_parameter_sharding;
  }
  /// What ZeRO-3 adds to every micro-batch: two all-gathers and a
  /// reduce-scatter (MicroBatchCost::sharding_seconds).
  double ShardingMicroBatchSeconds() const {
    return 2 * ParameterAllGatherSeconds() + GradientReduceScatterSeconds();
  }
  /// The two Ulysses all-to-alls of one layer's forward on one rank (Q, K
  /// and V packed into one; the output).
  double UlyssesLayerSeconds(const MicroBatchShape& shape) const;
  double PeakBytes(const MicroBatchShape& shape, int checkpointed_layers) const;
  /// Fewest checkpointed layers that fit the budget; nullopt if none does.
  std::optional<int> MinCheckpointedLayers(const MicroBatchShape& shape) const;
  /// Most tokens per rank one micro-batch may hold at that setting on an SP
  /// group of `sp_size` (groups beyond the KV-head count hold fewer).
  int64_t MaxTokensPerRank(int checkpointed_layers, int sp_size) const;
  double MemoryBudgetBytes() const { return cluster_.MemoryBudgetBytes(); }
  /// The step-end data-parallel gradient synchronization over every rank:
  /// the all-reduce of the gradients, or with ZeRO-1
  /// (memory.zero1_optimizer_sharding) the reduce-scatter of the gradients
  /// plus the all-gather of the updated weights (in the weights' bytes), as
  /// the worker runs them. The planner treats it as one block that the last
  /// micro-batch's backward may hide. 0 with ZeRO-3: every micro-batch's
  /// reduce-scatters replace it, and the next step's forward gathers the
  /// updated weight shards.
  double GradientAllReduceSeconds() const;
  /// The optimizer step after it, which nothing hides.
  double OptimizerStepSeconds() const;
  /// A group of this size spans nodes (its collectives use the NICs).
  bool SpansNodes(int sp_size) const {
    return sp_size > cluster_.gpus_per_node;
  }

  const ModelSpec& model() const { return model_; }
  const ClusterSpec& cluster() const { return cluster_; }
  const CostParams& params() const { return params_; }
  const ComputeModel& compute() const { return compute_; }
  const MemoryModel& memory() const { return memory_; }
  const CommModel& comm() const { return comm_; }

 private:
  CostModel(const ModelSpec& model, const ClusterSpec& cluster,
            const CostParams& params);
  /// ZeRO-3: one collective per unit over every rank in
  /// `bytes_per_parameter`, all-gathers if `gather`, else reduce-scatters.
  double ShardedUnitsSeconds(double bytes_per_parameter, bool gather) const;

  ModelSpec model_;
  ClusterSpec cluster_;
  CostParams params_;
  ComputeModel compute_;
  MemoryModel memory_;
  CommModel comm_;
};

}  // namespace dcp

#endif  // DCP_COST_MODEL_COST_MODEL_H_
