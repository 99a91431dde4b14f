#include "planner/client/proto_convert.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/client/batch_fingerprint.h"

namespace dcp {
namespace {

// Rounds to the nearest int64, saturating at the type's range (NaN -> 0), for
// core quantities kept as doubles that the wire carries as integers.
int64_t RoundToInt64(double value) {
  if (std::isnan(value)) return 0;
  constexpr double kMax = 9.2233720368547748e18;  // 2^63, not representable
  if (value >= kMax) return std::numeric_limits<int64_t>::max();
  if (value <= -kMax) return std::numeric_limits<int64_t>::min();
  return std::llround(value);
}

}  // namespace

v1::ModelSpec ModelSpecToProto(const ModelSpec& spec) {
  v1::ModelSpec proto;
  proto.set_name(spec.name);
  proto.set_num_layers(spec.num_layers);
  proto.set_hidden_size(static_cast<int32_t>(spec.hidden_size));
  proto.set_num_attention_heads(spec.num_attention_heads);
  proto.set_num_kv_heads(spec.num_kv_heads);
  proto.set_ffn_hidden_size(static_cast<int32_t>(spec.ffn_hidden_size));
  proto.set_vocab_size(static_cast<int32_t>(spec.vocab_size));
  proto.set_dtype_bytes(spec.dtype_bytes);
  proto.set_causal(spec.causal);
  proto.set_gated_mlp(spec.gated_mlp);
  proto.set_adaln_modulation(spec.adaln_modulation);
  return proto;
}

ModelSpec ModelSpecFromProto(const v1::ModelSpec& proto) {
  ModelSpec spec;
  spec.name = proto.name();
  spec.num_layers = proto.num_layers();
  spec.hidden_size = proto.hidden_size();
  spec.num_attention_heads = proto.num_attention_heads();
  spec.num_kv_heads = proto.num_kv_heads();
  spec.ffn_hidden_size = proto.ffn_hidden_size();
  spec.vocab_size = proto.vocab_size();
  spec.dtype_bytes = proto.dtype_bytes();
  spec.causal = proto.causal();
  spec.gated_mlp = proto.gated_mlp();
  spec.adaln_modulation = proto.adaln_modulation();
  return spec;
}

v1::ClusterSpec ClusterSpecToProto(const ClusterSpec& spec) {
  v1::ClusterSpec proto;
  proto.set_num_nodes(spec.num_nodes);
  proto.set_gpus_per_node(spec.gpus_per_node);
  proto.set_gpu_memory_bytes(RoundToInt64(spec.gpu_memory_bytes));
  proto.set_usable_memory_fraction(spec.usable_memory_fraction);
  proto.set_peak_flops_per_second(spec.peak_flops_per_second);
  proto.set_gemm_flops_per_second(spec.gemm_flops_per_second);
  proto.set_hbm_bytes_per_second(spec.hbm_bytes_per_second);
  proto.set_intra_node_bus_bytes_per_second(
      spec.intra_node_bus_bytes_per_second);
  proto.set_intra_node_latency_seconds(spec.intra_node_latency_seconds);
  proto.set_inter_node_bus_bytes_per_second(
      spec.inter_node_bus_bytes_per_second);
  proto.set_inter_node_latency_seconds(spec.inter_node_latency_seconds);
  proto.set_allreduce_intra_bus_bytes_per_second(
      spec.allreduce_intra_bus_bytes_per_second);
  return proto;
}

ClusterSpec ClusterSpecFromProto(const v1::ClusterSpec& proto) {
  ClusterSpec spec;
  spec.num_nodes = proto.num_nodes();
  spec.gpus_per_node = proto.gpus_per_node();
  spec.gpu_memory_bytes = static_cast<double>(proto.gpu_memory_bytes());
  spec.usable_memory_fraction = proto.usable_memory_fraction();
  spec.peak_flops_per_second = proto.peak_flops_per_second();
  spec.gemm_flops_per_second = proto.gemm_flops_per_second();
  spec.hbm_bytes_per_second = proto.hbm_bytes_per_second();
  spec.intra_node_bus_bytes_per_second =
      proto.intra_node_bus_bytes_per_second();
  spec.intra_node_latency_seconds = proto.intra_node_latency_seconds();
  spec.inter_node_bus_bytes_per_second =
      proto.inter_node_bus_bytes_per_second();
  spec.inter_node_latency_seconds = proto.inter_node_latency_seconds();
  spec.allreduce_intra_bus_bytes_per_second =
      proto.allreduce_intra_bus_bytes_per_second();
  return spec;
}

v1::ComputeParams ComputeParamsToProto(const ComputeParams& params) {
  v1::ComputeParams proto;
  proto.set_gemm_flops_per_second(params.gemm_flops_per_second);
  proto.set_gemm_half_efficiency_tokens(params.gemm_half_efficiency_tokens);
  proto.set_layer_fixed_seconds(params.layer_fixed_seconds);
  proto.set_attention_forward_flops_per_second(
      params.attention_forward_flops_per_second);
  proto.set_attention_forward_half_length_tokens(
      params.attention_forward_half_length_tokens);
  proto.set_attention_backward_flops_per_second(
      params.attention_backward_flops_per_second);
  proto.set_attention_backward_half_length_tokens(
      params.attention_backward_half_length_tokens);
  proto.set_elementwise_bytes_per_second(params.elementwise_bytes_per_second);
  proto.set_micro_batch_fixed_seconds(params.micro_batch_fixed_seconds);
  proto.set_sequence_layer_fixed_seconds(params.sequence_layer_fixed_seconds);
  proto.set_ulysses_layer_fixed_seconds(params.ulysses_layer_fixed_seconds);
  proto.set_sp_compute_scale(params.sp_compute_scale);
  proto.set_optimizer_step_seconds(params.optimizer_step_seconds);
  return proto;
}

ComputeParams ComputeParamsFromProto(const v1::ComputeParams& proto) {
  ComputeParams params;
  params.gemm_flops_per_second = proto.gemm_flops_per_second();
  params.gemm_half_efficiency_tokens = proto.gemm_half_efficiency_tokens();
  params.layer_fixed_seconds = proto.layer_fixed_seconds();
  params.attention_forward_flops_per_second =
      proto.attention_forward_flops_per_second();
  params.attention_forward_half_length_tokens =
      proto.attention_forward_half_length_tokens();
  params.attention_backward_flops_per_second =
      proto.attention_backward_flops_per_second();
  params.attention_backward_half_length_tokens =
      proto.attention_backward_half_length_tokens();
  params.elementwise_bytes_per_second = proto.elementwise_bytes_per_second();
  params.micro_batch_fixed_seconds = proto.micro_batch_fixed_seconds();
  params.sequence_layer_fixed_seconds = proto.sequence_layer_fixed_seconds();
  params.ulysses_layer_fixed_seconds = proto.ulysses_layer_fixed_seconds();
  // Unset (a message from before the field) is the identity.
  params.sp_compute_scale =
      proto.sp_compute_scale() == 0 ? 1.0 : proto.sp_compute_scale();
  params.optimizer_step_seconds = proto.optimizer_step_seconds();
  return params;
}

v1::MemoryParams MemoryParamsToProto(const MemoryParams& params) {
  v1::MemoryParams proto;
  proto.set_weight_bytes_per_parameter(params.weight_bytes_per_parameter);
  proto.set_gradient_bytes_per_parameter(params.gradient_bytes_per_parameter);
  proto.set_optimizer_bytes_per_parameter(params.optimizer_bytes_per_parameter);
  proto.set_zero1_optimizer_sharding(params.zero1_optimizer_sharding);
  proto.set_zero3_parameter_sharding(params.zero3_parameter_sharding);
  proto.set_fixed_bytes(params.fixed_bytes);
  proto.set_activation_bytes_per_token_per_layer(
      params.activation_bytes_per_token_per_layer);
  proto.set_selective_bytes_per_token_per_layer(
      params.selective_bytes_per_token_per_layer);
  proto.set_checkpoint_bytes_per_token_per_layer(
      params.checkpoint_bytes_per_token_per_layer);
  proto.set_logits_bytes_per_token(params.logits_bytes_per_token);
  proto.set_backward_working_bytes_per_token(
      params.backward_working_bytes_per_token);
  proto.set_communicator_bytes(params.communicator_bytes);
  proto.set_communicators_per_rank(params.communicators_per_rank);
  return proto;
}

MemoryParams MemoryParamsFromProto(const v1::MemoryParams& proto) {
  MemoryParams params;
  params.weight_bytes_per_parameter = proto.weight_bytes_per_parameter();
  params.gradient_bytes_per_parameter = proto.gradient_bytes_per_parameter();
  params.optimizer_bytes_per_parameter = proto.optimizer_bytes_per_parameter();
  params.zero1_optimizer_sharding = proto.zero1_optimizer_sharding();
  params.zero3_parameter_sharding = proto.zero3_parameter_sharding();
  params.fixed_bytes = proto.fixed_bytes();
  params.activation_bytes_per_token_per_layer =
      proto.activation_bytes_per_token_per_layer();
  params.selective_bytes_per_token_per_layer =
      proto.selective_bytes_per_token_per_layer();
  params.checkpoint_bytes_per_token_per_layer =
      proto.checkpoint_bytes_per_token_per_layer();
  params.logits_bytes_per_token = proto.logits_bytes_per_token();
  params.backward_working_bytes_per_token =
      proto.backward_working_bytes_per_token();
  params.communicator_bytes = proto.communicator_bytes();
  params.communicators_per_rank = proto.communicators_per_rank();
  return params;
}

v1::CommParams CommParamsToProto(const CommParams& params) {
  v1::CommParams proto;
  proto.set_all_to_all_intra_latency_seconds(
      params.all_to_all_intra_latency_seconds);
  proto.set_all_to_all_intra_bus_bytes_per_second(
      params.all_to_all_intra_bus_bytes_per_second);
  proto.set_all_to_all_inter_latency_seconds(
      params.all_to_all_inter_latency_seconds);
  proto.set_all_to_all_inter_bus_bytes_per_second(
      params.all_to_all_inter_bus_bytes_per_second);
  proto.set_all_reduce_intra_latency_seconds(
      params.all_reduce_intra_latency_seconds);
  proto.set_all_reduce_intra_bus_bytes_per_second(
      params.all_reduce_intra_bus_bytes_per_second);
  proto.set_all_reduce_inter_latency_seconds(
      params.all_reduce_inter_latency_seconds);
  proto.set_all_reduce_inter_bus_bytes_per_second(
      params.all_reduce_inter_bus_bytes_per_second);
  proto.set_reduce_scatter_intra_latency_seconds(
      params.reduce_scatter_intra_latency_seconds);
  proto.set_reduce_scatter_intra_bus_bytes_per_second(
      params.reduce_scatter_intra_bus_bytes_per_second);
  proto.set_reduce_scatter_inter_latency_seconds(
      params.reduce_scatter_inter_latency_seconds);
  proto.set_reduce_scatter_inter_bus_bytes_per_second(
      params.reduce_scatter_inter_bus_bytes_per_second);
  proto.set_all_gather_intra_latency_seconds(
      params.all_gather_intra_latency_seconds);
  proto.set_all_gather_intra_bus_bytes_per_second(
      params.all_gather_intra_bus_bytes_per_second);
  proto.set_all_gather_inter_latency_seconds(
      params.all_gather_inter_latency_seconds);
  proto.set_all_gather_inter_bus_bytes_per_second(
      params.all_gather_inter_bus_bytes_per_second);
  return proto;
}

CommParams CommParamsFromProto(const v1::CommParams& proto) {
  CommParams params;
  params.all_to_all_intra_latency_seconds =
      proto.all_to_all_intra_latency_seconds();
  params.all_to_all_intra_bus_bytes_per_second =
      proto.all_to_all_intra_bus_bytes_per_second();
  params.all_to_all_inter_latency_seconds =
      proto.all_to_all_inter_latency_seconds();
  params.all_to_all_inter_bus_bytes_per_second =
      proto.all_to_all_inter_bus_bytes_per_second();
  params.all_reduce_intra_latency_seconds =
      proto.all_reduce_intra_latency_seconds();
  params.all_reduce_intra_bus_bytes_per_second =
      proto.all_reduce_intra_bus_bytes_per_second();
  params.all_reduce_inter_latency_seconds =
      proto.all_reduce_inter_latency_seconds();
  params.all_reduce_inter_bus_bytes_per_second =
      proto.all_reduce_inter_bus_bytes_per_second();
  params.reduce_scatter_intra_latency_seconds =
      proto.reduce_scatter_intra_latency_seconds();
  params.reduce_scatter_intra_bus_bytes_per_second =
      proto.reduce_scatter_intra_bus_bytes_per_second();
  params.reduce_scatter_inter_latency_seconds =
      proto.reduce_scatter_inter_latency_seconds();
  params.reduce_scatter_inter_bus_bytes_per_second =
      proto.reduce_scatter_inter_bus_bytes_per_second();
  params.all_gather_intra_latency_seconds =
      proto.all_gather_intra_latency_seconds();
  params.all_gather_intra_bus_bytes_per_second =
      proto.all_gather_intra_bus_bytes_per_second();
  params.all_gather_inter_latency_seconds =
      proto.all_gather_inter_latency_seconds();
  params.all_gather_inter_bus_bytes_per_second =
      proto.all_gather_inter_bus_bytes_per_second();
  // A record from before the ZeRO-1 collectives were modelled has no rate
  // for them (0): they take the all-reduce's latency and bus bandwidth.
  if (params.reduce_scatter_intra_bus_bytes_per_second == 0 &&
      params.reduce_scatter_inter_bus_bytes_per_second == 0 &&
      params.all_gather_intra_bus_bytes_per_second == 0 &&
      params.all_gather_inter_bus_bytes_per_second == 0) {
    params.reduce_scatter_intra_latency_seconds =
        params.all_reduce_intra_latency_seconds;
    params.reduce_scatter_intra_bus_bytes_per_second =
        params.all_reduce_intra_bus_bytes_per_second;
    params.reduce_scatter_inter_latency_seconds =
        params.all_reduce_inter_latency_seconds;
    params.reduce_scatter_inter_bus_bytes_per_second =
        params.all_reduce_inter_bus_bytes_per_second;
    params.all_gather_intra_latency_seconds =
        params.all_reduce_intra_latency_seconds;
    params.all_gather_intra_bus_bytes_per_second =
        params.all_reduce_intra_bus_bytes_per_second;
    params.all_gather_inter_latency_seconds =
        params.all_reduce_inter_latency_seconds;
    params.all_gather_inter_bus_bytes_per_second =
        params.all_reduce_inter_bus_bytes_per_second;
  }
  return params;
}

v1::CostParams CostParamsToProto(const CostParams& params) {
  v1::CostParams proto;
  *proto.mutable_compute() = ComputeParamsToProto(params.compute);
  *proto.mutable_memory() = MemoryParamsToProto(params.memory);
  *proto.mutable_comm() = CommParamsToProto(params.comm);
  return proto;
}

CostParams CostParamsFromProto(const v1::CostParams& proto) {
  return CostParams{ComputeParamsFromProto(proto.compute()),
                    MemoryParamsFromProto(proto.memory()),
                    CommParamsFromProto(proto.comm())};
}

namespace {

void GroupsToProto(
    const std::vector<GroupPlan>& groups,
    google::protobuf::RepeatedPtrField<v1::Group>* groups_proto) {
  for (const GroupPlan& group : groups) {
    v1::Group* group_proto = groups_proto->Add();
    for (int rank : group.ranks) group_proto->add_ranks(rank);
    group_proto->set_sp_size(group.sp_size());
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      v1::MicroBatch* micro_batch_proto = group_proto->add_micro_batches();
      for (int index : micro_batch.sequence_indices) {
        micro_batch_proto->add_sequence_indices(index);
      }
      micro_batch_proto->set_checkpointed_layers(
          micro_batch.checkpointed_layers);
      micro_batch_proto->set_predicted_seconds(micro_batch.predicted_seconds);
      micro_batch_proto->set_predicted_peak_bytes(
          RoundToInt64(micro_batch.predicted_peak_bytes));
    }
    group_proto->set_predicted_seconds(group.predicted_seconds);
  }
}

// The groups of `groups_proto`, with `slowest_group_seconds` the largest
// group time.
std::vector<GroupPlan> GroupsFromProto(
    const google::protobuf::RepeatedPtrField<v1::Group>& groups_proto,
    double& slowest_group_seconds) {
  std::vector<GroupPlan> groups;
  slowest_group_seconds = 0;
  for (const v1::Group& group_proto : groups_proto) {
    GroupPlan group;
    group.ranks.assign(group_proto.ranks().begin(), group_proto.ranks().end());
    for (const v1::MicroBatch& micro_batch_proto :
         group_proto.micro_batches()) {
      MicroBatchPlan micro_batch;
      micro_batch.sequence_indices.assign(
          micro_batch_proto.sequence_indices().begin(),
          micro_batch_proto.sequence_indices().end());
      micro_batch.checkpointed_layers = micro_batch_proto.checkpointed_layers();
      micro_batch.predicted_seconds = micro_batch_proto.predicted_seconds();
      micro_batch.predicted_peak_bytes =
          static_cast<double>(micro_batch_proto.predicted_peak_bytes());
      group.micro_batches.push_back(std::move(micro_batch));
    }
    group.predicted_seconds = group_proto.predicted_seconds();
    slowest_group_seconds =
        std::max(slowest_group_seconds, group.predicted_seconds);
    groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace

v1::Plan PlanToProto(const Plan& plan, int64_t step) {
  v1::Plan proto;
  proto.set_step(step);
  proto.set_strategy(plan.strategy);
  GroupsToProto(plan.groups, proto.mutable_groups());
  proto.set_predicted_step_seconds(plan.predicted_step_seconds);
  proto.set_lower_bound_seconds(plan.lower_bound_seconds);
  proto.set_exposed_allreduce_seconds(plan.exposed_allreduce_seconds);
  return proto;
}

Plan PlanFromProto(const v1::Plan& proto) {
  Plan plan;
  plan.strategy = proto.strategy();
  plan.groups = GroupsFromProto(proto.groups(), plan.slowest_group_seconds);
  plan.predicted_step_seconds = proto.predicted_step_seconds();
  plan.lower_bound_seconds = proto.lower_bound_seconds();
  plan.exposed_allreduce_seconds = proto.exposed_allreduce_seconds();
  return plan;
}

v1::Plan PhasedPlanToProto(const PhasedPlan& plan, int64_t step) {
  v1::Plan proto;
  proto.set_step(step);
  proto.set_strategy(plan.strategy);
  if (plan.phases.size() == 1) {
    GroupsToProto(plan.phases.front().groups, proto.mutable_groups());
  } else {
    for (const Plan& phase : plan.phases) {
      v1::Phase* phase_proto = proto.add_phases();
      GroupsToProto(phase.groups, phase_proto->mutable_groups());
      phase_proto->set_predicted_seconds(phase.slowest_group_seconds);
    }
  }
  proto.set_predicted_step_seconds(plan.predicted_step_seconds);
  proto.set_lower_bound_seconds(plan.lower_bound_seconds);
  proto.set_exposed_allreduce_seconds(plan.exposed_allreduce_seconds);
  return proto;
}

PhasedPlan PhasedPlanFromProto(const v1::Plan& proto) {
  PhasedPlan plan;
  plan.strategy = proto.strategy();
  if (proto.phases().empty()) {
    plan.phases.push_back(PlanFromProto(proto));
  } else {
    for (const v1::Phase& phase_proto : proto.phases()) {
      Plan phase;
      phase.strategy = proto.strategy();
      phase.groups =
          GroupsFromProto(phase_proto.groups(), phase.slowest_group_seconds);
      plan.phases.push_back(std::move(phase));
    }
  }
  for (const Plan& phase : plan.phases) {
    plan.phases_seconds += phase.slowest_group_seconds;
  }
  plan.predicted_step_seconds = proto.predicted_step_seconds();
  plan.lower_bound_seconds = proto.lower_bound_seconds();
  plan.exposed_allreduce_seconds = proto.exposed_allreduce_seconds();
  return plan;
}

namespace {

// Each core profile op and its wire value, in the order errors list them.
constexpr std::pair<ProfileSample::Op, v1::ProfileSample::Op> kProfileOps[] = {
    {ProfileSample::Op::kGemm, v1::ProfileSample::GEMM},
    {ProfileSample::Op::kAttentionForward,
     v1::ProfileSample::ATTENTION_FORWARD},
    {ProfileSample::Op::kAttentionBackward,
     v1::ProfileSample::ATTENTION_BACKWARD},
    {ProfileSample::Op::kAllToAll, v1::ProfileSample::ALL_TO_ALL},
    {ProfileSample::Op::kAllReduce, v1::ProfileSample::ALL_REDUCE},
    {ProfileSample::Op::kActivationMemory,
     v1::ProfileSample::ACTIVATION_MEMORY},
    {ProfileSample::Op::kReduceScatter, v1::ProfileSample::REDUCE_SCATTER},
    {ProfileSample::Op::kAllGather, v1::ProfileSample::ALL_GATHER},
    {ProfileSample::Op::kMicroBatch, v1::ProfileSample::MICRO_BATCH},
    {ProfileSample::Op::kOptimizerStep, v1::ProfileSample::OPTIMIZER_STEP},
    {ProfileSample::Op::kSpMicroBatch, v1::ProfileSample::SP_MICRO_BATCH},
};

// "GEMM, ATTENTION_FORWARD, ... or SP_MICRO_BATCH".
std::string ProfileOpNames() {
  std::string names;
  for (size_t i = 0; i < std::size(kProfileOps); ++i) {
    if (i > 0) names += i + 1 < std::size(kProfileOps) ? ", " : " or ";
    names += v1::ProfileSample::Op_Name(kProfileOps[i].second);
  }
  return names;
}

}  // namespace

v1::ProfileSample ProfileSampleToProto(const ProfileSample& sample) {
  v1::ProfileSample proto;
  for (const auto& [op, wire_op] : kProfileOps) {
    if (op == sample.op) proto.set_op(wire_op);
  }
  proto.set_flops(sample.flops);
  proto.set_tokens(RoundToInt64(sample.tokens));
  proto.set_sum_squared_lengths(sample.sum_squared_lengths);
  proto.set_sum_lengths(RoundToInt64(sample.sum_lengths));
  proto.set_group_size(sample.group_size);
  proto.set_inter_node(sample.inter_node);
  proto.set_bytes(RoundToInt64(sample.bytes));
  proto.set_checkpointed_layers(sample.checkpointed_layers);
  proto.set_measured_seconds(sample.measured_seconds);
  proto.set_measured_bytes(RoundToInt64(sample.measured_bytes));
  proto.set_num_sequences(sample.num_sequences);
  proto.set_communication_seconds(sample.communication_seconds);
  return proto;
}

absl::StatusOr<ProfileSample> ProfileSampleFromProto(
    const v1::ProfileSample& proto, int index) {
  ProfileSample sample;
  if (proto.op() == v1::ProfileSample::OP_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(
        "samples[", index,
        "].op is OP_UNSPECIFIED; set it to the measured operation (",
        ProfileOpNames(), ")"));
  }
  const auto* known =
      std::find_if(std::begin(kProfileOps), std::end(kProfileOps),
                   [&](const auto& ops) { return ops.second == proto.op(); });
  if (known == std::end(kProfileOps)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "samples[", index, "].op = ", static_cast<int>(proto.op()),
        " is not a known operation; use a value of dcp.v1.ProfileSample.Op "
        "(a newer client may need a newer planner)"));
  }
  sample.op = known->first;
  sample.flops = proto.flops();
  sample.tokens = static_cast<double>(proto.tokens());
  sample.sum_squared_lengths = proto.sum_squared_lengths();
  sample.sum_lengths = static_cast<double>(proto.sum_lengths());
  sample.group_size = proto.group_size();
  sample.inter_node = proto.inter_node();
  sample.bytes = static_cast<double>(proto.bytes());
  sample.checkpointed_layers = proto.checkpointed_layers();
  sample.measured_seconds = proto.measured_seconds();
  sample.measured_bytes = static_cast<double>(proto.measured_bytes());
  sample.num_sequences = proto.num_sequences();
  sample.communication_seconds = proto.communication_seconds();
  return sample;
}

absl::StatusOr<std::vector<ProfileSample>> ProfileSamplesFromProto(
    const google::protobuf::RepeatedPtrField<v1::ProfileSample>& protos) {
  std::vector<ProfileSample> samples;
  samples.reserve(protos.size());
  for (int i = 0; i < protos.size(); ++i) {
    absl::StatusOr<ProfileSample> sample = ProfileSampleFromProto(protos[i], i);
    if (!sample.ok()) return sample.status();
    samples.push_back(*sample);
  }
  return samples;
}

v1::FitReport FitReportToProto(const ModelFitReport& report) {
  v1::FitReport proto;
  proto.set_name(report.name);
  proto.set_rms_relative_error(report.rms_relative_error);
  proto.set_max_relative_error(report.max_relative_error);
  proto.set_num_samples(report.num_samples);
  proto.set_used_defaults(report.used_defaults);
  proto.set_note(report.note);
  proto.set_held_out_rms_relative_error(report.held_out_rms_relative_error);
  proto.set_held_out_samples(report.held_out_samples);
  return proto;
}

ModelFitReport FitReportFromProto(const v1::FitReport& proto) {
  ModelFitReport report;
  report.name = proto.name();
  report.rms_relative_error = proto.rms_relative_error();
  report.max_relative_error = proto.max_relative_error();
  report.num_samples = proto.num_samples();
  report.used_defaults = proto.used_defaults();
  report.note = proto.note();
  report.held_out_rms_relative_error = proto.held_out_rms_relative_error();
  report.held_out_samples = proto.held_out_samples();
  return report;
}

uint64_t BatchFingerprint(const v1::GlobalBatch& batch) {
  BatchFingerprinter fingerprinter(static_cast<uint64_t>(batch.samples_size()));
  for (const v1::Sample& sample : batch.samples()) {
    fingerprinter.Add(sample.id(), sample.length_tokens());
  }
  return fingerprinter.Finish();
}

}  // namespace dcp
