#ifndef DCP_PLANNER_CLIENT_FAKE_PLANNER_CLIENT_H_
#define DCP_PLANNER_CLIENT_FAKE_PLANNER_CLIENT_H_

#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "planner/client/planner_client.h"

namespace dcp {

/// One RPC of FakePlannerClient: the answer the test programmed and the
/// requests received. Without an answer a call returns UNIMPLEMENTED naming
/// the method. Thread-safe: the answer runs outside the lock, so it may call
/// back into the fake.
template <typename Request, typename Response>
class FakeRpc {
 public:
  explicit FakeRpc(const char* method) : method_(method) {}

  /// Set before the code under test runs (not guarded).
  std::function<absl::StatusOr<Response>(const Request&)> answer;

  /// Records `request` and answers it.
  absl::StatusOr<Response> Call(const Request& request) {
    {
      absl::MutexLock lock(&mutex_);
      requests_.push_back(request);
    }
    if (!answer) {
      return absl::UnimplementedError(
          absl::StrCat("FakePlannerClient has no answer for ", method_,
                       "; set that FakeRpc's `answer`"));
    }
    return answer(request);
  }

  /// Copies of the requests received so far, in order.
  std::vector<Request> requests() const {
    absl::MutexLock lock(&mutex_);
    return requests_;
  }

 private:
  const char* const method_;
  mutable absl::Mutex mutex_;
  std::vector<Request> requests_ ABSL_GUARDED_BY(mutex_);
};

/// A PlannerClient for tests: each method is a FakeRpc member that records
/// every request and answers with what the test programmed. Thread-safe.
///
///   FakePlannerClient planner;
///   planner.get_plan.answer = [](const v1::GetPlanRequest& request) {
///     return MakePlan(request.batch());
///   };
///   ... run the worker against `planner` ...
///   EXPECT_EQ(planner.get_plan.requests().size(), 3);
class FakePlannerClient final : public PlannerClient {
 public:
  FakeRpc<v1::RegisterWorkerRequest, v1::RegisterWorkerResponse>
      register_worker{"RegisterWorker"};
  FakeRpc<v1::SubmitProfileRequest, v1::SubmitProfileResponse> submit_profile{
      "SubmitProfile"};
  FakeRpc<v1::SubmitBatchesRequest, v1::SubmitBatchesResponse> submit_batches{
      "SubmitBatches"};
  FakeRpc<v1::GetPlanRequest, v1::GetPlanResponse> get_plan{"GetPlan"};
  FakeRpc<v1::ReportStepStatsRequest, v1::ReportStepStatsResponse>
      report_step_stats{"ReportStepStats"};
  FakeRpc<v1::GetClusterModelRequest, v1::GetClusterModelResponse>
      get_cluster_model{"GetClusterModel"};
  FakeRpc<v1::ListWorkersRequest, v1::ListWorkersResponse> list_workers{
      "ListWorkers"};

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) override {
    return register_worker.Call(request);
  }
  absl::StatusOr<v1::SubmitProfileResponse> SubmitProfile(
      const v1::SubmitProfileRequest& request) override {
    return submit_profile.Call(request);
  }
  absl::StatusOr<v1::SubmitBatchesResponse> SubmitBatches(
      const v1::SubmitBatchesRequest& request) override {
    return submit_batches.Call(request);
  }
  absl::StatusOr<v1::GetPlanResponse> GetPlan(
      const v1::GetPlanRequest& request) override {
    return get_plan.Call(request);
  }
  absl::StatusOr<v1::ReportStepStatsResponse> ReportStepStats(
      const v1::ReportStepStatsRequest& request) override {
    return report_step_stats.Call(request);
  }
  absl::StatusOr<v1::GetClusterModelResponse> GetClusterModel(
      const v1::GetClusterModelRequest& request) override {
    return get_cluster_model.Call(request);
  }
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& request) override {
    return list_workers.Call(request);
  }
};

}  // namespace dcp

#endif  // DCP_PLANNER_CLIENT_FAKE_PLANNER_CLIENT_H_
