#ifndef DCP_PLANNER_SERVICE_GRPC_PLANNER_SERVICE_H_
#define DCP_PLANNER_SERVICE_GRPC_PLANNER_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/clock.h"
#include "dcp/v1/planner_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "planner/service/planner_handler.h"
#include "planner/service/prometheus_metrics.h"

namespace dcp {

/// The gRPC status for `status`: the same canonical code and message. The
/// one place the planner server converts absl::Status to grpc::Status.
grpc::Status ToGrpcStatus(const absl::Status& status);

struct GrpcPlannerServiceOptions {
  /// When set, every call must carry `authorization: Bearer <token>`
  /// metadata; others get UNAUTHENTICATED. Empty: no check.
  std::string bearer_token;
  /// Threads that run handler calls other than GetPlan. gRPC's callback
  /// threads must not block, so each call is queued to a pool of its own.
  int call_threads = 16;
  /// Threads that run GetPlan calls, apart from the others: a GetPlan may
  /// wait while its step is planned, and waiting GetPlans (every rank asks
  /// for step 0 at once) must not hold the threads RegisterWorker and the
  /// other calls need.
  int plan_call_threads = 16;
};

/// dcp.v1.Planner over gRPC: a thin wrapper around a PlannerHandler that
/// checks the bearer token, converts absl::Status to grpc::Status and records
/// each RPC's count and latency (by method and code) in `metrics`, once.
/// GetPlan answers with the handler's shared serialized response, sent as is
/// (no per-request serialization or copy).
///
/// Uses gRPC's callback API; GetPlan calls run on `plan_call_threads`
/// threads and every other call on `call_threads` threads, so that calls
/// waiting for a plan never delay registrations or reports. Thread-safe.
/// Register it with a grpc::ServerBuilder; call Shutdown() after the
/// grpc::Server has shut down and before destroying either.
class GrpcPlannerService final
    : public v1::Planner::WithRawCallbackMethod_GetPlan<
          v1::Planner::CallbackService> {
 public:
  /// `handler`, `metrics` and `clock` must outlive the service.
  GrpcPlannerService(PlannerHandler& handler, PrometheusPlannerMetrics& metrics,
                     const Clock& clock, GrpcPlannerServiceOptions options);
  ~GrpcPlannerService() override;

  GrpcPlannerService(const GrpcPlannerService&) = delete;
  GrpcPlannerService& operator=(const GrpcPlannerService&) = delete;

  /// Runs the calls still queued and stops the call threads; calls arriving
  /// later run on the gRPC thread. Idempotent.
  void Shutdown();

  grpc::ServerUnaryReactor* RegisterWorker(
      grpc::CallbackServerContext* context,
      const v1::RegisterWorkerRequest* request,
      v1::RegisterWorkerResponse* response) override;
  grpc::ServerUnaryReactor* SubmitProfile(
      grpc::CallbackServerContext* context,
      const v1::SubmitProfileRequest* request,
      v1::SubmitProfileResponse* response) override;
  grpc::ServerUnaryReactor* SubmitBatches(
      grpc::CallbackServerContext* context,
      const v1::SubmitBatchesRequest* request,
      v1::SubmitBatchesResponse* response) override;
  /// Raw: the request is parsed here, the response is the handler's bytes.
  grpc::ServerUnaryReactor* GetPlan(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReportStepStats(
      grpc::CallbackServerContext* context,
      const v1::ReportStepStatsRequest* request,
      v1::ReportStepStatsResponse* response) override;
  grpc::ServerUnaryReactor* GetClusterModel(
      grpc::CallbackServerContext* context,
      const v1::GetClusterModelRequest* request,
      v1::GetClusterModelResponse* response) override;
  grpc::ServerUnaryReactor* ListWorkers(
      grpc::CallbackServerContext* context,
      const v1::ListWorkersRequest* request,
      v1::ListWorkersResponse* response) override;

 private:
  class CallThreads;

  /// OK, or UNAUTHENTICATED when a token is required and the call's
  /// `authorization` metadata does not carry it (compared in constant time).
  grpc::Status Authenticate(const grpc::CallbackServerContext& context) const;
  /// Records the call's metrics, then finishes it with `status`.
  void Finish(grpc::ServerUnaryReactor* reactor, const char* method,
              absl::Time start, const grpc::Status& status);
  /// The common path of the typed methods: authenticate, queue, call the
  /// handler, convert, finish.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Serve(
      const char* method, grpc::CallbackServerContext* context,
      const Request* request, Response* response,
      absl::StatusOr<Response> (PlannerHandler::*call)(const Request&));

  PlannerHandler& handler_;
  PrometheusPlannerMetrics& metrics_;
  const Clock& clock_;
  /// "Bearer <token>", or empty when no token is required.
  const std::string expected_authorization_;
  const std::unique_ptr<CallThreads> call_threads_;
  /// GetPlan's own threads (see GrpcPlannerServiceOptions).
  const std::unique_ptr<CallThreads> plan_call_threads_;
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_GRPC_PLANNER_SERVICE_H_
