#include "cost_model/memory_model.h"

#include <algorithm>
#include <cmath>

#include "cost_model/saturating_math.h"

namespace dcp {

MemoryParams DefaultMemoryParams(const ModelSpec& model) {
  MemoryParams params;
  params.activation_bytes_per_token_per_layer =
      model.ActivationBytesPerTokenPerLayer();
  params.selective_bytes_per_token_per_layer =
      model.SelectiveActivationBytesPerTokenPerLayer();
  params.checkpoint_bytes_per_token_per_layer =
      model.CheckpointBytesPerTokenPerLayer();
  params.logits_bytes_per_token = model.LogitsBytesPerToken();
  params.backward_working_bytes_per_token = model.LogitsBytesPerToken();
  return params;
}

std::string_view TrainingPrecisionName(TrainingPrecision precision) {
  return precision == TrainingPrecision::kBf16 ? "bf16" : "fp32";
}

std::optional<TrainingPrecision> TrainingPrecisionFromName(
    std::string_view name) {
  if (name == "fp32") return TrainingPrecision::kFp32;
  if (name == "bf16") return TrainingPrecision::kBf16;
  return std::nullopt;
}

std::string_view ParameterShardingName(ParameterSharding sharding) {
  switch (sharding) {
    case ParameterSharding::kReplicated:
      return "none";
    case ParameterSharding::kZero1:
      return "zero1";
    case ParameterSharding::kZero3:
      return "zero3";
  }
  return "none";
}

std::optional<ParameterSharding> ParameterShardingFromName(
    std::string_view name) {
  for (ParameterSharding sharding :
       {ParameterSharding::kReplicated, ParameterSharding::kZero1,
        ParameterSharding::kZero3}) {
    if (name == ParameterShardingName(sharding)) return sharding;
  }
  return std::nullopt;
}

void SetTrainingStateBytes(TrainingPrecision precision, bool zero1,
                           MemoryParams& params) {
  SetTrainingStateBytes(precision,
                        zero1 ? ParameterSharding::kZero1
                              : ParameterSharding::kReplicated,
                        params);
}

void SetTrainingStateBytes(TrainingPrecision precision,
                           ParameterSharding sharding, MemoryParams& params) {
  const bool zero3 = sharding == ParameterSharding::kZero3;
  params.zero1_optimizer_sharding =
      zero3 || sharding == ParameterSharding::kZero1;
  params.zero3_parameter_sharding = zero3;
  params.gradient_bytes_per_parameter = 4;
  if (precision == TrainingPrecision::kBf16) {
    params.weight_bytes_per_parameter = 2;
    params.optimizer_bytes_per_parameter = 12;
  } else {
    params.weight_bytes_per_parameter = 4;
    // ZeRO-1 keeps a float32 master shard beside the full weights; without
    // sharding, or with ZeRO-3's weight shard, the weights are the master.
    params.optimizer_bytes_per_parameter =
        sharding == ParameterSharding::kZero1 ? 12 : 8;
  }
}

void SetCommunicatorMemory(CommunicatorBackend backend, int max_cached_groups,
                           MemoryParams& params) {
  params.communicators_per_rank = 1 + std::max(max_cached_groups, 0);
  params.communicator_bytes =
      backend == CommunicatorBackend::kNccl ? kNcclCommunicatorBytesH200 : 0;
}

int64_t MemoryModel::LargestShardingUnit(const ModelSpec& model) {
  const int64_t head =
      SaturatingAdd(SaturatingMul(model.vocab_size, model.hidden_size),
                    model.hidden_size);
  return std::max(model.ParametersPerLayer(), head);
}

double MemoryModel::ShardingWorkingSetBytes() const {
  if (!params_.zero3_parameter_sharding) return 0;
  return 2 * largest_unit_parameters_ *
         (params_.weight_bytes_per_parameter +
          params_.gradient_bytes_per_parameter);
}

double MemoryModel::ShardedStateBytes() const {
  if (params_.zero3_parameter_sharding) {
    return parameters_ * (params_.weight_bytes_per_parameter +
                          params_.gradient_bytes_per_parameter +
                          params_.optimizer_bytes_per_parameter);
  }
  return params_.zero1_optimizer_sharding
             ? parameters_ * params_.optimizer_bytes_per_parameter
             : 0;
}

double MemoryModel::StaticBytes() const {
  const double runtime_bytes =
      params_.communicator_bytes * params_.communicators_per_rank +
      params_.fixed_bytes;
  if (params_.zero3_parameter_sharding) {
    return ShardedStateBytes() / world_size_ + ShardingWorkingSetBytes() +
           runtime_bytes;
  }
  const double optimizer_shards =
      params_.zero1_optimizer_sharding ? world_size_ : 1;
  return parameters_ *
             (params_.weight_bytes_per_parameter +
              params_.gradient_bytes_per_parameter +
              params_.optimizer_bytes_per_parameter / optimizer_shards) +
         runtime_bytes;
}

double MemoryModel::BytesPerTokenPerLayer(RecomputeLevel level) const {
  switch (level) {
    case RecomputeLevel::kNone:
      return params_.activation_bytes_per_token_per_layer;
    case RecomputeLevel::kSelective:
      return params_.selective_bytes_per_token_per_layer;
    case RecomputeLevel::kFull:
      return params_.checkpoint_bytes_per_token_per_layer;
  }
  return params_.activation_bytes_per_token_per_layer;
}

double MemoryModel::StoredBytesPerTokenPerLayer(int sp_size) const {
  const int extra_copies = UlyssesKvCopiesOf(num_kv_heads_, sp_size) - 1;
  return params_.activation_bytes_per_token_per_layer +
         extra_copies * kv_copy_bytes_per_token_per_layer_;
}

double MemoryModel::ActivationBytesPerToken(int checkpointed_layers,
                                            int sp_size) const {
  const double stored = StoredBytesPerTokenPerLayer(sp_size);
  const double checkpoints =
      checkpointed_layers * params_.checkpoint_bytes_per_token_per_layer;
  const double forward_end = (num_layers_ - checkpointed_layers) * stored +
                             params_.logits_bytes_per_token;
  if (checkpointed_layers == 0) return checkpoints + forward_end;
  // Recomputing a checkpointed layer rebuilds its full activations, after
  // the stored layers' backward has freed theirs.
  const double recompute =
      stored + params_.backward_working_bytes_per_token;
  return checkpoints + std::max(forward_end, recompute);
}

double MemoryModel::PeakBytes(int64_t tokens_per_rank, int checkpointed_layers,
                              int sp_size) const {
  return StaticBytes() +
         static_cast<double>(tokens_per_rank) *
             ActivationBytesPerToken(checkpointed_layers, sp_size);
}

int64_t MemoryModel::MaxTokensPerRank(int checkpointed_layers, int sp_size,
                                      double budget_bytes) const {
  const double free_bytes = budget_bytes - StaticBytes();
  if (free_bytes <= 0) return 0;
  // Saturating: a (fitted) near-zero bytes per token must not wrap.
  return SaturatingToInt64(std::floor(
      free_bytes / ActivationBytesPerToken(checkpointed_layers, sp_size)));
}

std::optional<int> MemoryModel::MinCheckpointedLayers(
    int64_t tokens_per_rank, int sp_size, double budget_bytes) const {
  if (PeakBytes(tokens_per_rank, 0, sp_size) <= budget_bytes) return 0;
  // For k >= 1 the activation bytes fall linearly in k (each checkpointed
  // layer keeps its input instead of its activations) until the recompute's
  // working set dominates, so solve for the least k and step over rounding.
  const double saved_per_layer = StoredBytesPerTokenPerLayer(sp_size) -
                                 params_.checkpoint_bytes_per_token_per_layer;
  int k = 1;
  if (saved_per_layer > 0 && tokens_per_rank > 0) {
    const double excess = PeakBytes(tokens_per_rank, 1, sp_size) - budget_bytes;
    // In double, then clamped: a huge excess must not overflow an int.
    const double layers = std::ceil(
        excess / (saved_per_layer * static_cast<double>(tokens_per_rank)));
    k = std::clamp(SaturatingToInt(layers), 1, num_layers_);
  }
  while (k <= num_layers_ &&
         PeakBytes(tokens_per_rank, k, sp_size) > budget_bytes) {
    ++k;
  }
  while (k > 1 && PeakBytes(tokens_per_rank, k - 1, sp_size) <= budget_bytes) {
    --k;
  }
  if (k > num_layers_) return std::nullopt;
  return k;
}

}  // namespace dcp
