#include "planner/client/proto_convert.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cost_model/comm_model.h"
#include "planner/client/batch_fingerprint.h"
#include "planner/client/wire_fields.h"

namespace dcp {
namespace {

// Each core struct's table of members (k<Struct>Fields, beside the struct)
// names the wire fields that carry them, for both directions (wire_fields.h).

// The struct that `kFields` fills from `proto` over its defaults.
template <typename Struct, const auto& kFields, typename Proto>
Struct FromProto(const Proto& proto) {
  Struct value;
  CopyFromMessage<kFields>(proto, value);
  return value;
}

// The message that `kFields` fills from `value`.
template <typename Proto, const auto& kFields, typename Struct>
Proto ToProto(const Struct& value) {
  Proto proto;
  CopyToMessage<kFields>(value, proto);
  return proto;
}

}  // namespace

v1::ModelSpec ModelSpecToProto(const ModelSpec& spec) {
  return ToProto<v1::ModelSpec, kModelSpecFields>(spec);
}

ModelSpec ModelSpecFromProto(const v1::ModelSpec& proto) {
  return FromProto<ModelSpec, kModelSpecFields>(proto);
}

v1::ClusterSpec ClusterSpecToProto(const ClusterSpec& spec) {
  return ToProto<v1::ClusterSpec, kClusterSpecFields>(spec);
}

ClusterSpec ClusterSpecFromProto(const v1::ClusterSpec& proto) {
  return FromProto<ClusterSpec, kClusterSpecFields>(proto);
}

v1::ComputeParams ComputeParamsToProto(const ComputeParams& params) {
  return ToProto<v1::ComputeParams, kComputeParamsFields>(params);
}

ComputeParams ComputeParamsFromProto(const v1::ComputeParams& proto) {
  ComputeParams params = FromProto<ComputeParams, kComputeParamsFields>(proto);
  // Unset (a message from before the field) is the identity.
  if (params.sp_compute_scale == 0) params.sp_compute_scale = 1.0;
  return params;
}

v1::MemoryParams MemoryParamsToProto(const MemoryParams& params) {
  return ToProto<v1::MemoryParams, kMemoryParamsFields>(params);
}

MemoryParams MemoryParamsFromProto(const v1::MemoryParams& proto) {
  return FromProto<MemoryParams, kMemoryParamsFields>(proto);
}

v1::CommParams CommParamsToProto(const CommParams& params) {
  return ToProto<v1::CommParams, kCommParamsFields>(params);
}

CommParams CommParamsFromProto(const v1::CommParams& proto) {
  CommParams params = FromProto<CommParams, kCommParamsFields>(proto);
  // A record from before the ZeRO-1 collectives were modelled has no rate
  // for them (0): they take the all-reduce's latency and bus bandwidth.
  constexpr const CollectiveFields* kZeroOne[] = {&kReduceScatterFields,
                                                  &kAllGatherFields};
  const auto unrated = [&](const CollectiveFields* collective) {
    return params.*collective->intra.bus_bytes_per_second == 0 &&
           params.*collective->inter.bus_bytes_per_second == 0;
  };
  if (std::all_of(std::begin(kZeroOne), std::end(kZeroOne), unrated)) {
    for (const CollectiveFields* collective : kZeroOne) {
      for (const bool inter_node : {false, true}) {
        const CommLinkFields& link = collective->On(inter_node);
        const CommLinkFields& all_reduce = kAllReduceFields.On(inter_node);
        params.*link.latency_seconds = params.*all_reduce.latency_seconds;
        params.*link.bus_bytes_per_second =
            params.*all_reduce.bus_bytes_per_second;
      }
    }
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
  if (proto.phases().empty()) return AsOnePhase(PlanFromProto(proto));
  PhasedPlan plan;
  plan.strategy = proto.strategy();
  for (const v1::Phase& phase_proto : proto.phases()) {
    Plan phase;
    phase.strategy = proto.strategy();
    phase.groups =
        GroupsFromProto(phase_proto.groups(), phase.slowest_group_seconds);
    plan.phases.push_back(std::move(phase));
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
  return ToProto<v1::FitReport, kModelFitReportFields>(report);
}

ModelFitReport FitReportFromProto(const v1::FitReport& proto) {
  return FromProto<ModelFitReport, kModelFitReportFields>(proto);
}

uint64_t BatchFingerprint(const v1::GlobalBatch& batch) {
  BatchFingerprinter fingerprinter(static_cast<uint64_t>(batch.samples_size()));
  for (const v1::Sample& sample : batch.samples()) {
    fingerprinter.Add(sample.id(), sample.length_tokens());
  }
  return fingerprinter.Finish();
}

}  // namespace dcp
