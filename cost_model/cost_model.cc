#include "cost_model/cost_model.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "common/struct_fields.h"

namespace dcp {

namespace {

/// Whether `value` is finite and > 0 (`positive`) or >= 0.
bool InRange(double value, bool positive) {
  return std::isfinite(value) && value >= 0 && !(positive && value == 0);
}

/// The error for the parameter `name`, whose `value` is not InRange.
absl::Status OutOfRange(absl::string_view name, double value, bool positive) {
  return absl::InvalidArgumentError(
      absl::StrCat("cost params: ", name, " = ", value,
                   "; it must be a finite number ", positive ? "> 0" : ">= 0"));
}

/// The compute rates: they divide work, so they must be > 0.
constexpr double ComputeParams::*kComputeRates[] = {
    &ComputeParams::gemm_flops_per_second,
    &ComputeParams::attention_forward_flops_per_second,
    &ComputeParams::attention_backward_flops_per_second,
    &ComputeParams::elementwise_bytes_per_second,
    &ComputeParams::sp_compute_scale,
};

bool IsRate(double ComputeParams::*member) {
  return std::find(std::begin(kComputeRates), std::end(kComputeRates),
                   member) != std::end(kComputeRates);
}

/// No memory parameter divides: each must be >= 0.
bool IsRate(double MemoryParams::*) { return false; }

/// The collectives' bandwidths divide bytes: they must be > 0.
bool IsRate(double CommParams::*member) {
  for (const CollectiveFields* collective : kCollectiveFields) {
    for (const bool inter_node : {false, true}) {
      if (collective->On(inter_node).bus_bytes_per_second == member) {
        return true;
      }
    }
  }
  return false;
}

/// OK when each numeric member of `params` (by its table `fields`) is finite
/// and > 0 for a rate (IsRate), >= 0 otherwise; else an error naming the
/// first that is not as "<group>.<field>" (built only then: a valid model
/// builds no names).
template <typename Params>
absl::Status CheckParams(absl::Span<const StructField<Params>> fields,
                         const Params& params, absl::string_view group) {
  for (const StructField<Params>& field : fields) {
    double value = 0;
    bool positive = false;
    if (const auto* member = std::get_if<double Params::*>(&field.member)) {
      value = params.**member;
      positive = IsRate(*member);
    } else if (const auto* count = std::get_if<int Params::*>(&field.member)) {
      value = params.**count;
    } else {
      continue;  // a switch (bool) has no range
    }
    if (!InRange(value, positive)) {
      return OutOfRange(absl::StrCat(group, ".", field.name), value, positive);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateCostParams(const CostParams& params) {
  DCP_RETURN_IF_ERROR(CheckParams<ComputeParams>(kComputeParamsFields,
                                                 params.compute, "compute"));
  DCP_RETURN_IF_ERROR(
      CheckParams<MemoryParams>(kMemoryParamsFields, params.memory, "memory"));
  return CheckParams<CommParams>(kCommParamsFields, params.comm, "comm");
}

CostParams DefaultCostParams(const ModelSpec& model,
                             const ClusterSpec& cluster) {
  CostParams params{DefaultComputeParams(model, cluster),
                    DefaultMemoryParams(model), DefaultCommParams(cluster)};
  // The cluster's figures are an H200's: NCCL workers with their default
  // group cache. The planner service replaces this with what its workers
  // register (backend and --max-cached-groups).
  SetCommunicatorMemory(CommunicatorBackend::kNccl, kDefaultNcclMaxCachedGroups,
                        params.memory);
  return params;
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
  if (absl::Status s = ValidateCostParams(params); !s.ok()) return s;
  return CostModel(model, cluster, params);
}

absl::StatusOr<CostModel> CostModel::CreateDefault(const ModelSpec& model,
                                                   const ClusterSpec& cluster) {
  return Create(model, cluster, DefaultCostParams(model, cluster));
}

double CostModel::UlyssesLayerSeconds(const MicroBatchShape& shape) const {
  if (shape.sp_size <= 1 || shape.num_sequences == 0) return 0;
  // Two all-to-alls, as the workers run them: Q, K and V packed into one
  // to the head-sharded layout (K and V replicated when the group
  // outnumbers the KV heads), and the attention output back.
  const double tokens = static_cast<double>(shape.tokens_per_rank);
  const double output_bytes =
      model_.dtype_bytes * static_cast<double>(model_.hidden_size) * tokens;
  const double qkv_bytes =
      model_.UlyssesBytesPerTokenPerLayer(shape.sp_size) * tokens -
      output_bytes;
  const bool inter = SpansNodes(shape.sp_size);
  return comm_.AllToAllSeconds(qkv_bytes, shape.sp_size, inter) +
         comm_.AllToAllSeconds(output_bytes, shape.sp_size, inter);
}

MicroBatchCost CostModel::MicroBatch(const MicroBatchShape& shape,
                                     int checkpointed_layers) const {
  MicroBatchCost cost;
  if (shape.num_sequences == 0) return cost;
  const int layers = model_.num_layers;
  // At SP >= 2 every compute term is scaled (sp_compute_scale); the
  // all-to-alls are not.
  const double scale =
      shape.sp_size > 1 ? params_.compute.sp_compute_scale : 1.0;
  const double forward = scale * compute_.LayerForwardSeconds(shape);
  const double backward = scale * compute_.LayerBackwardSeconds(shape);
  const double all_to_all = UlyssesLayerSeconds(shape);
  const double head = scale * compute_.HeadSeconds(shape);
  const double head_forward = head / (1 + ComputeModel::kBackwardGemmFactor);
  // Fixed costs: per sequence in each layer pass, per layer pass of an SP
  // group of two or more (the layout around the all-to-alls, counted as
  // compute), and per micro-batch (half counted with the forward, half with
  // the backward).
  const double sequences =
      scale *
      (compute_.SequencesLayerPassSeconds(shape) +
       (shape.sp_size > 1 ? params_.compute.ulysses_layer_fixed_seconds : 0));
  const double micro_batch_half =
      scale * params_.compute.micro_batch_fixed_seconds / 2;
  cost.forward_seconds = layers * (forward + sequences + all_to_all) +
                         head_forward + micro_batch_half;
  cost.recompute_seconds =
      checkpointed_layers * (forward + sequences + all_to_all);
  cost.backward_seconds = layers * (backward + sequences + all_to_all) +
                          cost.recompute_seconds + (head - head_forward) +
                          micro_batch_half;
  cost.communication_seconds = (2 * layers + checkpointed_layers) * all_to_all;
  if (params_.memory.zero3_parameter_sharding) {
    const double gather = ParameterAllGatherSeconds();
    const double reduce = GradientReduceScatterSeconds();
    cost.forward_seconds += gather;
    cost.backward_seconds += gather + reduce;
    cost.sharding_seconds = 2 * gather + reduce;
  }
  cost.total_seconds = cost.forward_seconds + cost.backward_seconds;
  cost.peak_bytes = PeakBytes(shape, checkpointed_layers);
  return cost;
}

double CostModel::PeakBytes(const MicroBatchShape& shape,
                            int checkpointed_layers) const {
  return memory_.PeakBytes(shape.tokens_per_rank, checkpointed_layers,
                           shape.sp_size);
}

std::optional<int> CostModel::MinCheckpointedLayers(
    const MicroBatchShape& shape) const {
  return memory_.MinCheckpointedLayers(shape.tokens_per_rank, shape.sp_size,
                                       MemoryBudgetBytes());
}

int64_t CostModel::MaxTokensPerRank(int checkpointed_layers,
                                    int sp_size) const {
  return memory_.MaxTokensPerRank(checkpointed_layers, sp_size,
                                  MemoryBudgetBytes());
}

double CostModel::OptimizerStepSeconds() const {
  return params_.compute.optimizer_step_seconds;
}

double CostModel::ShardedUnitsSeconds(double bytes_per_parameter,
                                      bool gather) const {
  if (!params_.memory.zero3_parameter_sharding) return 0;
  const int ranks = cluster_.NumGpus();
  const bool inter_node = cluster_.num_nodes > 1;
  auto unit_seconds = [&](double parameters) {
    if (parameters <= 0) return 0.0;
    const double bytes = parameters * bytes_per_parameter;
    return gather ? comm_.AllGatherSeconds(bytes, ranks, inter_node)
                  : comm_.ReduceScatterSeconds(bytes, ranks, inter_node);
  };
  const double table = static_cast<double>(model_.vocab_size) *
                       static_cast<double>(model_.hidden_size);
  const double head = table + static_cast<double>(model_.hidden_size);
  return model_.num_layers *
             unit_seconds(static_cast<double>(model_.ParametersPerLayer())) +
         unit_seconds(table) + unit_seconds(head);
}

double CostModel::ParameterAllGatherSeconds() const {
  return ShardedUnitsSeconds(params_.memory.weight_bytes_per_parameter,
                             /*gather=*/true);
}

double CostModel::GradientReduceScatterSeconds() const {
  return ShardedUnitsSeconds(params_.memory.gradient_bytes_per_parameter,
                             /*gather=*/false);
}

double CostModel::GradientAllReduceSeconds() const {
  if (params_.memory.zero3_parameter_sharding) return 0;
  const double parameters = static_cast<double>(model_.ParameterCount());
  const double gradient_bytes =
      parameters * params_.memory.gradient_bytes_per_parameter;
  const int ranks = cluster_.NumGpus();
  const bool inter_node = cluster_.num_nodes > 1;
  if (!params_.memory.zero1_optimizer_sharding) {
    return comm_.AllReduceSeconds(gradient_bytes, ranks, inter_node);
  }
  const double weight_bytes =
      parameters * params_.memory.weight_bytes_per_parameter;
  return comm_.ReduceScatterSeconds(gradient_bytes, ranks, inter_node) +
         comm_.AllGatherSeconds(weight_bytes, ranks, inter_node);
}

}  // namespace dcp
