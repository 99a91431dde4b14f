#ifndef DCP_PLANNER_CLIENT_PLANNER_RPCS_H_
#define DCP_PLANNER_CLIENT_PLANNER_RPCS_H_

#include "absl/status/statusor.h"
#include "dcp/v1/planner_service.pb.h"

namespace dcp {

/// The dcp.v1.Planner RPCs as calls that return absl::StatusOr: what the
/// planner answers (PlannerHandler, planner/service/planner_handler.h) and
/// what a worker calls it through (PlannerClient, planner_client.h).
class PlannerRpcs {
 public:
  virtual ~PlannerRpcs() = default;

  virtual absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) = 0;
  virtual absl::StatusOr<v1::SubmitProfileResponse> SubmitProfile(
      const v1::SubmitProfileRequest& request) = 0;
  virtual absl::StatusOr<v1::SubmitBatchesResponse> SubmitBatches(
      const v1::SubmitBatchesRequest& request) = 0;
  virtual absl::StatusOr<v1::GetPlanResponse> GetPlan(
      const v1::GetPlanRequest& request) = 0;
  virtual absl::StatusOr<v1::ReportStepStatsResponse> ReportStepStats(
      const v1::ReportStepStatsRequest& request) = 0;
  virtual absl::StatusOr<v1::GetClusterModelResponse> GetClusterModel(
      const v1::GetClusterModelRequest& request) = 0;
  virtual absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& request) = 0;
};

}  // namespace dcp

#endif  // DCP_PLANNER_CLIENT_PLANNER_RPCS_H_
