#ifndef DCP_PLANNER_SERVICE_GRPC_PLANNER_SERVICE_H_
#define DCP_PLANNER_SERVICE_GRPC_PLANNER_SERVICE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/clock.h"
#include "dcp/v1/planner_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "planner/client/planner_rpcs.h"
#include "planner/service/call_memory_budget.h"
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
  /// The memory calls carrying samples (SubmitBatches, GetPlan with its
  /// batch) may hold at once while they parse and run, reserved from their
  /// wire bytes before parsing (CallMemoryBudget); 0: no bound.
  int64_t call_memory_budget_bytes = 0;
  /// Where that budget comes from, for messages.
  std::string call_memory_budget_source;
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
/// Every method is raw (bytes in, bytes out) so that request bytes that do
/// not parse get INVALID_ARGUMENT naming the method, where gRPC's typed
/// methods answer UNIMPLEMENTED with no message.
using RawPlannerService = v1::Planner::WithRawCallbackMethod_RegisterWorker<
    v1::Planner::WithRawCallbackMethod_SubmitProfile<
        v1::Planner::WithRawCallbackMethod_SubmitBatches<
            v1::Planner::WithRawCallbackMethod_GetPlan<
                v1::Planner::WithRawCallbackMethod_ReportStepStats<
                    v1::Planner::WithRawCallbackMethod_GetClusterModel<
                        v1::Planner::WithRawCallbackMethod_ListWorkers<
                            v1::Planner::CallbackService>>>>>>>;

class GrpcPlannerService final : public RawPlannerService {
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

  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SubmitProfile(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SubmitBatches(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  /// The response is the handler's shared bytes, sent without a copy.
  grpc::ServerUnaryReactor* GetPlan(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReportStepStats(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetClusterModel(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;

 private:
  class CallThreads;

  /// OK, or UNAUTHENTICATED when a token is required and the call's
  /// `authorization` metadata does not carry it as `Bearer <token>` (the
  /// scheme in any case, RFC 7235; the token compared exactly, in constant
  /// time).
  grpc::Status Authenticate(const grpc::CallbackServerContext& context) const;
  /// Records the call's metrics, then finishes it with `status`.
  void Finish(grpc::ServerUnaryReactor* reactor, const char* method,
              absl::Time start, const grpc::Status& status);
  /// The common path: authenticates, then runs `run` on `threads` (unless
  /// the call was cancelled while queued) and finishes with its status.
  grpc::ServerUnaryReactor* Serve(const char* method, CallThreads& threads,
                                  grpc::CallbackServerContext* context,
                                  std::function<grpc::Status()> run);
  /// A method that parses its request (INVALID_ARGUMENT naming `method` if
  /// the bytes do not parse), calls the handler's `call` and serializes its
  /// answer.
  /// `batch_field` (0: none) is where the request carries batches
  /// (WithParsedRequest).
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* ServeTyped(
      const char* method, grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
      absl::StatusOr<Response> (PlannerRpcs::*call)(const Request&),
      int batch_field = 0);
  /// Reserves what parsing and handling `request` will take when its
  /// GlobalBatch messages at `batch_field` carry samples (wire bytes plus
  /// kParsedBytesPerSample each), waiting until `deadline`; INVALID_ARGUMENT
  /// for bytes that are not a message (naming `request_type`),
  /// RESOURCE_EXHAUSTED when it does not fit.
  grpc::Status ReserveCallMemory(const char* method,
                                 const std::string& request_type,
                                 const grpc::ByteBuffer& request,
                                 int batch_field, absl::Time deadline,
                                 CallMemoryBudget::Reservation* reservation);
  /// Parses `request` as a `Request` (INVALID_ARGUMENT naming `method` when
  /// it does not parse) and runs `run` on it. When `batch_field` (0: none)
  /// carries samples, first reserves the memory that takes
  /// (ReserveCallMemory), and once the parsed request is freed returns a
  /// large call's freed memory to the kernel before giving the bytes back.
  template <typename Request>
  grpc::Status WithParsedRequest(
      const char* method, const grpc::CallbackServerContext& context,
      const grpc::ByteBuffer& request, int batch_field,
      const std::function<grpc::Status(Request&)>& run);

  PlannerHandler& handler_;
  PrometheusPlannerMetrics& metrics_;
  const Clock& clock_;
  /// The token calls must carry, or empty when none is required.
  const std::string bearer_token_;
  const std::unique_ptr<CallThreads> call_threads_;
  /// GetPlan's own threads (see GrpcPlannerServiceOptions).
  const std::unique_ptr<CallThreads> plan_call_threads_;
  CallMemoryBudget call_memory_;
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_GRPC_PLANNER_SERVICE_H_
