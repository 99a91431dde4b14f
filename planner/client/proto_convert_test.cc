#include "planner/client/proto_convert.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "common/struct_fields_testing.h"
#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan_testing.h"
#include "planner/search/phased_planner.h"
#include "planner/search/planner.h"

namespace dcp {
namespace {

using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

ModelSpec Llama8b() { return ModelPreset("llama3-8b").value(); }

// A `Message` with every field set, through reflection, to a distinct
// non-zero value that both its wire type and its core member carry exactly:
// whole numbers below 2^53, true, the field's name, an enum's last value.
template <typename Message>
Message EveryFieldSet() {
  Message message;
  const google::protobuf::Descriptor& descriptor = *message.GetDescriptor();
  const google::protobuf::Reflection& reflection = *message.GetReflection();
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const FieldDescriptor* field = descriptor.field(i);
    const int number = field->number();
    switch (field->is_repeated() ? FieldDescriptor::CPPTYPE_MESSAGE
                                 : field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_DOUBLE:
        reflection.SetDouble(&message, field, number + 0.25);
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        reflection.SetInt32(&message, field, 100 + number);
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        reflection.SetInt64(&message, field, (int64_t{1} << 40) + number);
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        reflection.SetBool(&message, field, true);
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        reflection.SetString(&message, field, field->name());
        break;
      case FieldDescriptor::CPPTYPE_ENUM: {
        const google::protobuf::EnumDescriptor& values = *field->enum_type();
        reflection.SetEnum(&message, field,
                           values.value(values.value_count() - 1));
        break;
      }
      default:
        ADD_FAILURE() << field->full_name() << ": no test value for its type";
    }
  }
  std::vector<const FieldDescriptor*> set;
  reflection.ListFields(message, &set);
  EXPECT_EQ(static_cast<int>(set.size()), descriptor.field_count())
      << message.ShortDebugString();
  return message;
}

// Every wire field survives FromProto then ToProto: a field missing from
// either direction comes back as 0.
template <typename Message, typename Core>
void ExpectEveryWireFieldRoundTrips(Core (*from_proto)(const Message&),
                                    Message (*to_proto)(const Core&)) {
  const Message sent = EveryFieldSet<Message>();
  const Message back = to_proto(from_proto(sent));
  EXPECT_TRUE(MessageDifferencer::Equals(back, sent))
      << "sent:     " << sent.ShortDebugString()
      << "\ngot back: " << back.ShortDebugString();
}

// `plan`'s predicted peak bytes rounded to whole bytes, which survive the
// wire's integers.
void RoundPeakBytes(Plan& plan) {
  for (GroupPlan& group : plan.groups) {
    for (MicroBatchPlan& micro_batch : group.micro_batches) {
      micro_batch.predicted_peak_bytes =
          std::round(micro_batch.predicted_peak_bytes);
    }
  }
}

TEST(ProtoConvertTest, ModelSpecKeepsEveryWireField) {
  ExpectEveryWireFieldRoundTrips(ModelSpecFromProto, ModelSpecToProto);
}

TEST(ProtoConvertTest, ClusterSpecKeepsEveryWireField) {
  ExpectEveryWireFieldRoundTrips(ClusterSpecFromProto, ClusterSpecToProto);
}

TEST(ProtoConvertTest, ComputeParamsKeepsEveryWireField) {
  ExpectEveryWireFieldRoundTrips(ComputeParamsFromProto, ComputeParamsToProto);
}

TEST(ProtoConvertTest, MemoryParamsKeepsEveryWireField) {
  ExpectEveryWireFieldRoundTrips(MemoryParamsFromProto, MemoryParamsToProto);
}

TEST(ProtoConvertTest, CommParamsKeepsEveryWireField) {
  ExpectEveryWireFieldRoundTrips(CommParamsFromProto, CommParamsToProto);
}

TEST(ProtoConvertTest, FitReportKeepsEveryWireField) {
  ExpectEveryWireFieldRoundTrips(FitReportFromProto, FitReportToProto);
}

TEST(ProtoConvertTest, ProfileSampleKeepsEveryWireField) {
  const v1::ProfileSample sent = EveryFieldSet<v1::ProfileSample>();
  const absl::StatusOr<ProfileSample> sample = ProfileSampleFromProto(sent, 0);
  ASSERT_TRUE(sample.ok()) << sample.status();
  const v1::ProfileSample back = ProfileSampleToProto(*sample);
  EXPECT_TRUE(MessageDifferencer::Equals(back, sent))
      << "sent:     " << sent.ShortDebugString()
      << "\ngot back: " << back.ShortDebugString();
}

TEST(ProtoConvertTest, ModelSpecRoundTrips) {
  for (const std::string& name : ModelPresetNames()) {
    const ModelSpec spec = ModelPreset(name).value();
    const ModelSpec back = ModelSpecFromProto(ModelSpecToProto(spec));
    EXPECT_EQ(ModelSpecToJson(back), ModelSpecToJson(spec)) << name;
  }
  ModelSpec dit = ModelPreset("video-dit-1b").value();
  const v1::ModelSpec proto = ModelSpecToProto(dit);
  EXPECT_EQ(proto.name(), "video-dit-1b");
  EXPECT_EQ(proto.causal(), dit.causal);
  EXPECT_EQ(proto.adaln_modulation(), dit.adaln_modulation);
}

TEST(ProtoConvertTest, ClusterSpecRoundTrips) {
  ClusterSpec spec = H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/8);
  spec.usable_memory_fraction = 0.7;
  spec.inter_node_latency_seconds = 31e-6;
  const v1::ClusterSpec proto = ClusterSpecToProto(spec);
  EXPECT_EQ(proto.num_nodes(), 4);
  EXPECT_EQ(proto.gpu_memory_bytes(), 141000000000);
  EXPECT_EQ(ClusterSpecToJson(ClusterSpecFromProto(proto)),
            ClusterSpecToJson(spec));
}

TEST(ProtoConvertTest, ClusterSpecMemoryIsRoundedAndSaturatesOnTheWire) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  const struct {
    double bytes;
    int64_t wire;
  } cases[] = {
      {2.5, 3},
      {-2.5, -3},
      {1e300, kMax},
      {std::numeric_limits<double>::infinity(), kMax},
      {9223372036854775808.0, kMax},  // 2^63
      {-1e300, kMin},
      {std::numeric_limits<double>::quiet_NaN(), 0},
  };
  for (const auto& [bytes, wire] : cases) {
    ClusterSpec spec;
    spec.gpu_memory_bytes = bytes;
    EXPECT_EQ(ClusterSpecToProto(spec).gpu_memory_bytes(), wire) << bytes;
  }
}

TEST(ProtoConvertTest, CostParamsRoundTripExactly) {
  const ModelSpec model = Llama8b();
  CostParams params = DefaultCostParams(model, H200Cluster(4, 8));
  params.compute.gemm_half_efficiency_tokens = 123.456;
  params.memory.fixed_bytes = 4e9 + 1;
  params.memory.zero1_optimizer_sharding = false;
  params.memory.zero3_parameter_sharding = true;
  params.comm.all_reduce_inter_latency_seconds = 1.0 / 3;
  params.compute.sp_compute_scale = 0.75;
  const v1::CostParams proto = CostParamsToProto(params);
  const CostParams back = CostParamsFromProto(proto);
  EXPECT_TRUE(MessageDifferencer::Equals(CostParamsToProto(back), proto));
  EXPECT_EQ(back.compute.gemm_flops_per_second,
            params.compute.gemm_flops_per_second);
  EXPECT_EQ(back.memory.zero1_optimizer_sharding, false);
  EXPECT_TRUE(back.memory.zero3_parameter_sharding);
  EXPECT_EQ(back.comm.all_reduce_inter_latency_seconds, 1.0 / 3);
  EXPECT_EQ(back.compute.sp_compute_scale, 0.75);
  // A message from before sp_compute_scale (unset) is the identity.
  v1::CostParams old = proto;
  old.mutable_compute()->clear_sp_compute_scale();
  EXPECT_EQ(CostParamsFromProto(old).compute.sp_compute_scale, 1);
  EXPECT_EQ(proto.compute().layer_fixed_seconds(),
            params.compute.layer_fixed_seconds);
  EXPECT_EQ(proto.memory().checkpoint_bytes_per_token_per_layer(),
            params.memory.checkpoint_bytes_per_token_per_layer);
  EXPECT_EQ(proto.comm().all_to_all_inter_bus_bytes_per_second(),
            params.comm.all_to_all_inter_bus_bytes_per_second);
}

TEST(ProtoConvertTest, ZeroOneCollectiveParamsRoundTripOrTakeTheAllReduces) {
  CostParams params = DefaultCostParams(Llama8b(), H200Cluster(4, 8));
  params.comm.reduce_scatter_inter_bus_bytes_per_second = 12.5e9;
  params.comm.all_gather_intra_latency_seconds = 7e-6;
  const CostParams back = CostParamsFromProto(CostParamsToProto(params));
  EXPECT_EQ(back.comm.reduce_scatter_inter_bus_bytes_per_second, 12.5e9);
  EXPECT_EQ(back.comm.all_gather_intra_latency_seconds, 7e-6);

  // A record written before the fields existed: the all-reduce's values.
  v1::CostParams old = CostParamsToProto(params);
  v1::CommParams& comm = *old.mutable_comm();
  comm.clear_reduce_scatter_intra_latency_seconds();
  comm.clear_reduce_scatter_intra_bus_bytes_per_second();
  comm.clear_reduce_scatter_inter_latency_seconds();
  comm.clear_reduce_scatter_inter_bus_bytes_per_second();
  comm.clear_all_gather_intra_latency_seconds();
  comm.clear_all_gather_intra_bus_bytes_per_second();
  comm.clear_all_gather_inter_latency_seconds();
  comm.clear_all_gather_inter_bus_bytes_per_second();
  const CostParams read = CostParamsFromProto(old);
  EXPECT_EQ(read.comm.reduce_scatter_inter_bus_bytes_per_second,
            params.comm.all_reduce_inter_bus_bytes_per_second);
  EXPECT_EQ(read.comm.all_gather_intra_latency_seconds,
            params.comm.all_reduce_intra_latency_seconds);
  EXPECT_TRUE(ValidateCostParams(read).ok());
}

TEST(ProtoConvertTest, PlannedPlanRoundTripsWithStep) {
  const CostModel cost_model =
      CostModel::CreateDefault(Llama8b(), H200Cluster(4, 8)).value();
  std::vector<int64_t> lengths;
  for (int i = 0; i < 40; ++i) lengths.push_back(2000 + 997 * i);
  lengths.push_back(90000);
  Plan plan = Planner(cost_model, {}).PlanBatch(lengths).value();
  RoundPeakBytes(plan);
  const v1::Plan proto = PlanToProto(plan, /*step=*/17);
  EXPECT_EQ(proto.step(), 17);
  EXPECT_EQ(proto.strategy(), plan.strategy);
  ASSERT_EQ(proto.groups_size(), static_cast<int>(plan.groups.size()));
  for (int g = 0; g < proto.groups_size(); ++g) {
    EXPECT_EQ(proto.groups(g).sp_size(), plan.groups[g].sp_size());
    EXPECT_EQ(proto.groups(g).ranks_size(), plan.groups[g].sp_size());
  }
  const Plan back = PlanFromProto(proto);
  ExpectSamePlan(back, plan);
  EXPECT_TRUE(MessageDifferencer::Equals(PlanToProto(back, 17), proto));
}

TEST(ProtoConvertTest, PhasedPlanRoundTripsThroughPhases) {
  const CostModel cost_model =
      CostModel::CreateDefault(Llama8b(), H200Cluster(2, 8)).value();
  std::vector<int64_t> lengths = {131072};
  for (int i = 0; i < 200; ++i) lengths.push_back(1024 + 37 * (i % 11));
  PhasedPlannerOptions options;
  options.planner_options.strategy_name = "dcp-phased";
  PhasedPlan plan = PlanPhasedBatch(cost_model, lengths, options).value();
  ASSERT_EQ(plan.phases.size(), 2u) << "this batch should re-group";
  for (Plan& phase : plan.phases) RoundPeakBytes(phase);
  const v1::Plan proto = PhasedPlanToProto(plan, /*step=*/3);
  EXPECT_EQ(proto.step(), 3);
  EXPECT_EQ(proto.strategy(), "dcp-phased");
  EXPECT_EQ(proto.groups_size(), 0);
  ASSERT_EQ(proto.phases_size(), 2);
  EXPECT_EQ(proto.phases(0).predicted_seconds(),
            plan.phases[0].slowest_group_seconds);
  const PhasedPlan back = PhasedPlanFromProto(proto);
  EXPECT_EQ(back.strategy, plan.strategy);
  EXPECT_EQ(back.predicted_step_seconds, plan.predicted_step_seconds);
  EXPECT_EQ(back.lower_bound_seconds, plan.lower_bound_seconds);
  EXPECT_EQ(back.exposed_allreduce_seconds, plan.exposed_allreduce_seconds);
  EXPECT_DOUBLE_EQ(back.phases_seconds, plan.phases_seconds);
  ASSERT_EQ(back.phases.size(), 2u);
  for (size_t p = 0; p < 2; ++p) {
    EXPECT_EQ(back.phases[p].slowest_group_seconds,
              plan.phases[p].slowest_group_seconds);
    ASSERT_EQ(back.phases[p].groups.size(), plan.phases[p].groups.size());
    for (size_t g = 0; g < plan.phases[p].groups.size(); ++g) {
      EXPECT_EQ(back.phases[p].groups[g].ranks, plan.phases[p].groups[g].ranks);
    }
  }
  EXPECT_TRUE(IsValidPhasedPlan(cost_model, lengths, back));
  EXPECT_TRUE(MessageDifferencer::Equals(PhasedPlanToProto(back, 3), proto));
}

TEST(ProtoConvertTest, OneLayoutIsReadAsOnePhaseAndWrittenAsGroups) {
  const CostModel cost_model =
      CostModel::CreateDefault(Llama8b(), H200Cluster(1, 8)).value();
  const std::vector<int64_t> lengths = {4096, 4096, 8192, 16384};
  const Plan plan = Planner(cost_model, {}).PlanBatch(lengths).value();
  const v1::Plan proto = PlanToProto(plan, /*step=*/5);
  const PhasedPlan phased = PhasedPlanFromProto(proto);
  ASSERT_EQ(phased.phases.size(), 1u);
  EXPECT_EQ(phased.phases[0].groups.size(), plan.groups.size());
  EXPECT_EQ(phased.phases_seconds, plan.slowest_group_seconds);
  EXPECT_EQ(phased.predicted_step_seconds, plan.predicted_step_seconds);
  const v1::Plan again = PhasedPlanToProto(phased, /*step=*/5);
  EXPECT_EQ(again.phases_size(), 0);
  EXPECT_TRUE(MessageDifferencer::Equals(again, proto));
}

TEST(ProtoConvertTest, SyntheticProfileRoundTrips) {
  const CostModel truth =
      CostModel::CreateDefault(Llama8b(), H200Cluster(2, 8)).value();
  const std::vector<ProfileSample> samples =
      SyntheticProfile(truth, /*seed=*/7, /*relative_noise=*/0.02);
  ASSERT_FALSE(samples.empty());
  v1::ProfileSet set;
  for (const ProfileSample& sample : samples) {
    *set.add_samples() = ProfileSampleToProto(sample);
  }
  absl::StatusOr<std::vector<ProfileSample>> back =
      ProfileSamplesFromProto(set.samples());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    const ProfileSample& a = (*back)[i];
    const ProfileSample& b = samples[i];
    EXPECT_EQ(a.op, b.op) << i;
    EXPECT_EQ(a.flops, b.flops) << i;
    EXPECT_EQ(a.tokens, std::round(b.tokens)) << i;
    EXPECT_EQ(a.sum_squared_lengths, b.sum_squared_lengths) << i;
    EXPECT_EQ(a.sum_lengths, std::round(b.sum_lengths)) << i;
    EXPECT_EQ(a.group_size, b.group_size) << i;
    EXPECT_EQ(a.inter_node, b.inter_node) << i;
    EXPECT_EQ(a.bytes, std::round(b.bytes)) << i;
    EXPECT_EQ(a.checkpointed_layers, b.checkpointed_layers) << i;
    EXPECT_EQ(a.measured_seconds, b.measured_seconds) << i;
    EXPECT_NEAR(a.measured_bytes, b.measured_bytes, 0.5) << i;
  }
  // Every op is represented and maps back to itself.
  for (auto op :
       {ProfileSample::Op::kGemm, ProfileSample::Op::kAttentionForward,
        ProfileSample::Op::kAttentionBackward, ProfileSample::Op::kAllToAll,
        ProfileSample::Op::kAllReduce, ProfileSample::Op::kActivationMemory,
        ProfileSample::Op::kReduceScatter, ProfileSample::Op::kAllGather}) {
    ProfileSample sample;
    sample.op = op;
    EXPECT_EQ(ProfileSampleFromProto(ProfileSampleToProto(sample), 0)->op, op);
  }
}

TEST(ProtoConvertTest, EveryWireOpIsACoreOpAndBack) {
  const google::protobuf::EnumDescriptor& ops =
      *v1::ProfileSample::Op_descriptor();
  for (int i = 0; i < ops.value_count(); ++i) {
    const auto op = static_cast<v1::ProfileSample::Op>(ops.value(i)->number());
    if (op == v1::ProfileSample::OP_UNSPECIFIED) continue;
    v1::ProfileSample proto;
    proto.set_op(op);
    absl::StatusOr<ProfileSample> sample = ProfileSampleFromProto(proto, 0);
    ASSERT_TRUE(sample.ok()) << ops.value(i)->name() << ": " << sample.status();
    EXPECT_EQ(ProfileSampleToProto(*sample).op(), op) << ops.value(i)->name();
  }
}

TEST(ProtoConvertTest, UnspecifiedOrUnknownOpNamesTheIndex) {
  v1::ProfileSet set;
  set.add_samples()->set_op(v1::ProfileSample::GEMM);
  set.add_samples()->set_op(v1::ProfileSample::ALL_TO_ALL);
  set.add_samples();  // OP_UNSPECIFIED
  absl::StatusOr<std::vector<ProfileSample>> samples =
      ProfileSamplesFromProto(set.samples());
  ASSERT_EQ(samples.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(samples.status().message(), HasSubstr("samples[2].op"));
  EXPECT_THAT(samples.status().message(), HasSubstr("OP_UNSPECIFIED"));
  EXPECT_THAT(samples.status().message(),
              HasSubstr("set it to the measured operation (GEMM, "
                        "ATTENTION_FORWARD, ATTENTION_BACKWARD, ALL_TO_ALL, "
                        "ALL_REDUCE, ACTIVATION_MEMORY, REDUCE_SCATTER, "
                        "ALL_GATHER, MICRO_BATCH, OPTIMIZER_STEP or "
                        "SP_MICRO_BATCH)"));

  v1::ProfileSample unknown;
  unknown.set_op(static_cast<v1::ProfileSample::Op>(42));
  absl::StatusOr<ProfileSample> sample = ProfileSampleFromProto(unknown, 5);
  ASSERT_EQ(sample.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sample.status().message(), HasSubstr("samples[5].op = 42"));
}

TEST(ProtoConvertTest, FitReportRoundTrips) {
  ModelFitReport report;
  report.name = "attention_backward";
  report.num_samples = 12;
  report.rms_relative_error = 0.013;
  report.max_relative_error = 0.04;
  report.used_defaults = false;
  report.note = "fitted";
  const v1::FitReport proto = FitReportToProto(report);
  EXPECT_EQ(proto.name(), "attention_backward");
  EXPECT_EQ(proto.num_samples(), 12);
  EXPECT_FALSE(proto.used_defaults());
  testing::ExpectEveryFieldEq<ModelFitReport>(
      kModelFitReportFields, FitReportFromProto(proto), report);
}

}  // namespace
}  // namespace dcp
