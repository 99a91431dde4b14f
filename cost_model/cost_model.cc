#include "cost_model/cost_model.h"

#include "absl/status/status.h"

namespace dcp {

CostParams DefaultCostParams(const ModelSpec& model,
                             const ClusterSpec& cluster) {
  return CostParams{DefaultComputeParams(model, cluster),
                    DefaultMemoryParams(model), DefaultCommParams(cluster)};
}

CostModel::CostModel(const ModelSpec& model, const ClusterSpec& cluster,
                     const CostParams& params)
    : model_(model),
      cluster_(cluster),
      params_(params),
      compute_(model, params.compute),
      memory_(model, params.memory, cluster.NumGpus()),
      comm_(params.comm) {}

absl::StatusOr<CostModel> CostModel::Create(const ModelSpec& model,
                                            const ClusterSpec& cluster,
                                            const CostParams& params) {
  if (absl::Status s = ValidateModelSpec(model); !s.ok()) return s;
  if (absl::Status s = ValidateClusterSpec(cluster); !s.ok()) return s;
  return CostModel(model, cluster, params);
}

absl::StatusOr<CostModel> CostModel::CreateDefault(const ModelSpec& model,
                                                   const ClusterSpec& cluster) {
  return Create(model, cluster, DefaultCostParams(model, cluster));
}

double CostModel::UlyssesLayerSeconds(const MicroBatchShape& shape) const {
  if (shape.sp_size <= 1 || shape.num_sequences == 0) return 0;
  // Q, K, V to head-sharded layout and the output back: four all-to-alls.
  const double bytes = model_.UlyssesBytesPerTokenPerLayer() *
                       static_cast<double>(shape.tokens_per_rank);
  const bool inter = SpansNodes(shape.sp_size);
  return 4 * comm_.AllToAllSeconds(bytes / 4, shape.sp_size, inter);
}

MicroBatchCost CostModel::MicroBatch(const MicroBatchShape& shape,
                                     int checkpointed_layers) const {
  MicroBatchCost cost;
  if (shape.num_sequences == 0) return cost;
  const int layers = model_.num_layers;
  const double forward = compute_.LayerForwardSeconds(shape);
  const double backward = compute_.LayerBackwardSeconds(shape);
  const double all_to_all = UlyssesLayerSeconds(shape);
  const double head = compute_.HeadSeconds(shape);
  const double head_forward = head / (1 + ComputeModel::kBackwardGemmFactor);
  cost.forward_seconds = layers * (forward + all_to_all) + head_forward;
  cost.recompute_seconds = checkpointed_layers * (forward + all_to_all);
  cost.backward_seconds = layers * (backward + all_to_all) +
                          cost.recompute_seconds + (head - head_forward);
  cost.communication_seconds =
      (2 * layers + checkpointed_layers) * all_to_all;
  cost.total_seconds = cost.forward_seconds + cost.backward_seconds;
  cost.peak_bytes = PeakBytes(shape, checkpointed_layers);
  return cost;
}

double CostModel::PeakBytes(const MicroBatchShape& shape,
                            int checkpointed_layers) const {
  return memory_.PeakBytes(shape.tokens_per_rank, checkpointed_layers);
}

std::optional<int> CostModel::MinCheckpointedLayers(
    const MicroBatchShape& shape) const {
  return memory_.MinCheckpointedLayers(shape.tokens_per_rank,
                                       MemoryBudgetBytes());
}

int64_t CostModel::MaxTokensPerRank(int checkpointed_layers) const {
  return memory_.MaxTokensPerRank(checkpointed_layers, MemoryBudgetBytes());
}

double CostModel::GradientAllReduceSeconds() const {
  const double bytes = static_cast<double>(model_.ParameterCount()) *
                       params_.memory.gradient_bytes_per_parameter;
  return comm_.AllReduceSeconds(bytes, cluster_.NumGpus(),
                                cluster_.num_nodes > 1);
}

}  // namespace dcp
