#ifndef DCP_PLANNER_SERVICE_FAKE_PLANNER_CLIENT_H_
#define DCP_PLANNER_SERVICE_FAKE_PLANNER_CLIENT_H_

#include <functional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "planner/client/planner_client.h"

namespace dcp {

/// A PlannerClient for tests: records every request and answers with what
/// the test programmed. A method without an answer returns UNIMPLEMENTED
/// naming it. Thread-safe: answers run outside the lock, so an answer may
/// call back into the fake.
///
///   FakePlannerClient planner;
///   planner.on_get_plan = [](const v1::GetPlanRequest& request) {
///     return MakePlan(request.batch());
///   };
///   ... run the worker against `planner` ...
///   EXPECT_EQ(planner.get_plan_requests().size(), 3);
class FakePlannerClient final : public PlannerClient {
 public:
  template <typename Request, typename Response>
  using Answer = std::function<absl::StatusOr<Response>(const Request&)>;

  /// Set these before the code under test runs (not guarded).
  Answer<v1::RegisterWorkerRequest, v1::RegisterWorkerResponse>
      on_register_worker;
  Answer<v1::SubmitProfileRequest, v1::SubmitProfileResponse> on_submit_profile;
  Answer<v1::SubmitBatchesRequest, v1::SubmitBatchesResponse> on_submit_batches;
  Answer<v1::GetPlanRequest, v1::GetPlanResponse> on_get_plan;
  Answer<v1::ReportStepStatsRequest, v1::ReportStepStatsResponse>
      on_report_step_stats;
  Answer<v1::GetClusterModelRequest, v1::GetClusterModelResponse>
      on_get_cluster_model;
  Answer<v1::ListWorkersRequest, v1::ListWorkersResponse> on_list_workers;

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) override {
    return Record(request, register_worker_requests_, on_register_worker,
                  "RegisterWorker");
  }
  absl::StatusOr<v1::SubmitProfileResponse> SubmitProfile(
      const v1::SubmitProfileRequest& request) override {
    return Record(request, submit_profile_requests_, on_submit_profile,
                  "SubmitProfile");
  }
  absl::StatusOr<v1::SubmitBatchesResponse> SubmitBatches(
      const v1::SubmitBatchesRequest& request) override {
    return Record(request, submit_batches_requests_, on_submit_batches,
                  "SubmitBatches");
  }
  absl::StatusOr<v1::GetPlanResponse> GetPlan(
      const v1::GetPlanRequest& request) override {
    return Record(request, get_plan_requests_, on_get_plan, "GetPlan");
  }
  absl::StatusOr<v1::ReportStepStatsResponse> ReportStepStats(
      const v1::ReportStepStatsRequest& request) override {
    return Record(request, report_step_stats_requests_, on_report_step_stats,
                  "ReportStepStats");
  }
  absl::StatusOr<v1::GetClusterModelResponse> GetClusterModel(
      const v1::GetClusterModelRequest& request) override {
    return Record(request, get_cluster_model_requests_, on_get_cluster_model,
                  "GetClusterModel");
  }
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& request) override {
    return Record(request, list_workers_requests_, on_list_workers,
                  "ListWorkers");
  }

  /// Copies of the requests received so far, in order.
  std::vector<v1::RegisterWorkerRequest> register_worker_requests() const {
    absl::MutexLock lock(&mutex_);
    return register_worker_requests_;
  }
  std::vector<v1::SubmitProfileRequest> submit_profile_requests() const {
    absl::MutexLock lock(&mutex_);
    return submit_profile_requests_;
  }
  std::vector<v1::SubmitBatchesRequest> submit_batches_requests() const {
    absl::MutexLock lock(&mutex_);
    return submit_batches_requests_;
  }
  std::vector<v1::GetPlanRequest> get_plan_requests() const {
    absl::MutexLock lock(&mutex_);
    return get_plan_requests_;
  }
  std::vector<v1::ReportStepStatsRequest> report_step_stats_requests() const {
    absl::MutexLock lock(&mutex_);
    return report_step_stats_requests_;
  }
  std::vector<v1::GetClusterModelRequest> get_cluster_model_requests() const {
    absl::MutexLock lock(&mutex_);
    return get_cluster_model_requests_;
  }
  std::vector<v1::ListWorkersRequest> list_workers_requests() const {
    absl::MutexLock lock(&mutex_);
    return list_workers_requests_;
  }

 private:
  template <typename Request, typename Response>
  absl::StatusOr<Response> Record(const Request& request,
                                  std::vector<Request>& requests,
                                  const Answer<Request, Response>& answer,
                                  const char* method) {
    {
      absl::MutexLock lock(&mutex_);
      requests.push_back(request);
    }
    if (!answer) {
      return absl::UnimplementedError(
          absl::StrCat("FakePlannerClient has no answer for ", method,
                       "; set its on_* member"));
    }
    return answer(request);
  }

  mutable absl::Mutex mutex_;
  std::vector<v1::RegisterWorkerRequest> register_worker_requests_
      ABSL_GUARDED_BY(mutex_);
  std::vector<v1::SubmitProfileRequest> submit_profile_requests_
      ABSL_GUARDED_BY(mutex_);
  std::vector<v1::SubmitBatchesRequest> submit_batches_requests_
      ABSL_GUARDED_BY(mutex_);
  std::vector<v1::GetPlanRequest> get_plan_requests_ ABSL_GUARDED_BY(mutex_);
  std::vector<v1::ReportStepStatsRequest> report_step_stats_requests_
      ABSL_GUARDED_BY(mutex_);
  std::vector<v1::GetClusterModelRequest> get_cluster_model_requests_
      ABSL_GUARDED_BY(mutex_);
  std::vector<v1::ListWorkersRequest> list_workers_requests_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_FAKE_PLANNER_CLIENT_H_
