// Conversions between the dcp.v1 wire messages (proto/dcp/v1/*.proto) and
// the planner core's plain structs. Pure functions; thread-safe.
//
// Conversions to the core never validate beyond what the types force (the
// core's own Validate*/Create functions do that), except where a wire value
// has no core equivalent (an unspecified or unknown profile op).

#ifndef DCP_PLANNER_SERVICE_PROTO_CONVERT_H_
#define DCP_PLANNER_SERVICE_PROTO_CONVERT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "cost_model/model_spec.h"
#include "dcp/v1/batch.pb.h"
#include "dcp/v1/cluster.pb.h"
#include "dcp/v1/model.pb.h"
#include "dcp/v1/plan.pb.h"
#include "dcp/v1/profile.pb.h"
#include "google/protobuf/repeated_field.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"

namespace dcp {

v1::ModelSpec ModelSpecToProto(const ModelSpec& spec);
ModelSpec ModelSpecFromProto(const v1::ModelSpec& proto);

v1::ClusterSpec ClusterSpecToProto(const ClusterSpec& spec);
ClusterSpec ClusterSpecFromProto(const v1::ClusterSpec& proto);

v1::ComputeParams ComputeParamsToProto(const ComputeParams& params);
ComputeParams ComputeParamsFromProto(const v1::ComputeParams& proto);
v1::MemoryParams MemoryParamsToProto(const MemoryParams& params);
MemoryParams MemoryParamsFromProto(const v1::MemoryParams& proto);
v1::CommParams CommParamsToProto(const CommParams& params);
CommParams CommParamsFromProto(const v1::CommParams& proto);
v1::CostParams CostParamsToProto(const CostParams& params);
CostParams CostParamsFromProto(const v1::CostParams& proto);

/// The plan of step `step`. Predicted peak bytes are rounded to whole bytes
/// (the wire carries integers); the slowest-group time is not on the wire.
v1::Plan PlanToProto(const Plan& plan, int64_t step);
/// The core plan of `proto` (its step is `proto.step()`). The slowest-group
/// time is recomputed as the largest group time; group ranks are taken from
/// `Group.ranks` (sp_size is implied by them).
Plan PlanFromProto(const v1::Plan& proto);

/// A plan that may re-group the ranks within a step: one phase is written
/// as PlanToProto writes a plan (in `groups`, readable by PlanFromProto),
/// two or more in `phases`. The step's predictions are the phased plan's.
v1::Plan PhasedPlanToProto(const PhasedPlan& plan, int64_t step);
/// The phased plan of `proto`: its `phases`, or one phase of its `groups`
/// when it has none. Each phase's slowest group is recomputed from its
/// groups' times.
PhasedPlan PhasedPlanFromProto(const v1::Plan& proto);

v1::ProfileSample ProfileSampleToProto(const ProfileSample& sample);
/// INVALID_ARGUMENT naming `index` when the op is OP_UNSPECIFIED or not a
/// known value.
absl::StatusOr<ProfileSample> ProfileSampleFromProto(
    const v1::ProfileSample& proto, int index);
/// Every sample in order; the first bad one fails the whole conversion.
absl::StatusOr<std::vector<ProfileSample>> ProfileSamplesFromProto(
    const google::protobuf::RepeatedPtrField<v1::ProfileSample>& protos);

v1::FitReport FitReportToProto(const ModelFitReport& report);
ModelFitReport FitReportFromProto(const v1::FitReport& proto);

/// BatchFingerprint (batch_fingerprint.h) of `batch`'s samples, without
/// converting them: equal to the fingerprint of the same samples as
/// std::vector<Sample>. The step is not part of it.
uint64_t BatchFingerprint(const v1::GlobalBatch& batch);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PROTO_CONVERT_H_
