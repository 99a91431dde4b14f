#include "planner/service/grpc_planner_service.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace dcp {
namespace {

constexpr char kAuthorizationKey[] = "authorization";

/// True when `given` equals `expected`, in time that depends only on
/// `expected`'s length (no early exit on the first differing byte).
bool ConstantTimeEquals(absl::string_view given, absl::string_view expected) {
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char given_byte =
        i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    difference |= given_byte ^ static_cast<unsigned char>(expected[i]);
  }
  return difference == 0;
}

/// Frees the shared_ptr a zero-copy slice keeps its bytes alive with.
void ReleaseSharedString(void* owner) {
  delete static_cast<std::shared_ptr<const std::string>*>(owner);
}

/// A byte buffer over `bytes` without copying them: the slice holds a
/// reference to the string until gRPC has sent it.
grpc::ByteBuffer SharedByteBuffer(std::shared_ptr<const std::string> bytes) {
  auto* owner = new std::shared_ptr<const std::string>(std::move(bytes));
  grpc::Slice slice(const_cast<char*>((*owner)->data()), (*owner)->size(),
                    &ReleaseSharedString, owner);
  return grpc::ByteBuffer(&slice, /*nslices=*/1);
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode both number the canonical codes
  // 0..16 identically.
  const int code = static_cast<int>(status.code());
  const grpc::StatusCode grpc_code =
      code >= 0 && code <= static_cast<int>(grpc::StatusCode::UNAUTHENTICATED)
          ? static_cast<grpc::StatusCode>(code)
          : grpc::StatusCode::UNKNOWN;
  return grpc::Status(grpc_code, std::string(status.message()));
}

/// A fixed pool of threads running queued calls in order. Thread-safe.
class GrpcPlannerService::CallThreads {
 public:
  explicit CallThreads(int num_threads) {
    for (int i = 0; i < std::max(num_threads, 1); ++i) {
      threads_.emplace_back([this] { Run(); });
    }
  }

  ~CallThreads() { Stop(); }

  /// Queues `call`; after Stop() runs it at once on the calling thread.
  void Schedule(std::function<void()> call) {
    {
      absl::MutexLock lock(&mutex_);
      if (!stopping_) {
        queue_.push_back(std::move(call));
        return;
      }
    }
    call();
  }

  /// Runs what is queued, then joins the threads. Idempotent.
  void Stop() {
    {
      absl::MutexLock lock(&mutex_);
      stopping_ = true;
    }
    for (std::thread& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
  }

 private:
  void Run() {
    while (true) {
      std::function<void()> call;
      {
        absl::MutexLock lock(&mutex_);
        mutex_.Await(absl::Condition(
            +[](CallThreads* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mutex_) {
              return self->stopping_ || !self->queue_.empty();
            },
            this));
        if (queue_.empty()) return;  // Stopping and drained.
        call = std::move(queue_.front());
        queue_.pop_front();
      }
      call();
    }
  }

  absl::Mutex mutex_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  /// Started in the constructor, joined by Stop().
  std::vector<std::thread> threads_;
};

GrpcPlannerService::GrpcPlannerService(PlannerHandler& handler,
                                       PrometheusPlannerMetrics& metrics,
                                       const Clock& clock,
                                       GrpcPlannerServiceOptions options)
    : handler_(handler),
      metrics_(metrics),
      clock_(clock),
      expected_authorization_(
          options.bearer_token.empty()
              ? std::string()
              : absl::StrCat("Bearer ", options.bearer_token)),
      call_threads_(std::make_unique<CallThreads>(options.call_threads)),
      plan_call_threads_(
          std::make_unique<CallThreads>(options.plan_call_threads)) {}

GrpcPlannerService::~GrpcPlannerService() { Shutdown(); }

void GrpcPlannerService::Shutdown() {
  call_threads_->Stop();
  plan_call_threads_->Stop();
}

grpc::Status GrpcPlannerService::Authenticate(
    const grpc::CallbackServerContext& context) const {
  if (expected_authorization_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find(kAuthorizationKey);
  if (found == metadata.end()) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        "this planner requires 'authorization: Bearer <token>' metadata; "
        "give the client the planner's token (the planner reads it from "
        "--token-file or DCP_PLANNER_TOKEN)");
  }
  const absl::string_view given(found->second.data(), found->second.size());
  if (!ConstantTimeEquals(given, expected_authorization_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the bearer token in 'authorization' is not this "
                        "planner's token");
  }
  return grpc::Status::OK;
}

void GrpcPlannerService::Finish(grpc::ServerUnaryReactor* reactor,
                                const char* method, absl::Time start,
                                const grpc::Status& status) {
  // Recorded before the call completes, so a client that got its answer
  // sees it counted.
  metrics_.RpcCompleted(method, status.error_code(),
                        absl::ToDoubleSeconds(clock_.Now() - start));
  reactor->Finish(status);
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* GrpcPlannerService::Serve(
    const char* method, grpc::CallbackServerContext* context,
    const Request* request, Response* response,
    absl::StatusOr<Response> (PlannerHandler::*call)(const Request&)) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time start = clock_.Now();
  grpc::Status authenticated = Authenticate(*context);
  if (!authenticated.ok()) {
    Finish(reactor, method, start, authenticated);
    return reactor;
  }
  call_threads_->Schedule(
      [this, method, context, request, response, call, reactor, start] {
        if (context->IsCancelled()) {
          Finish(reactor, method, start,
                 grpc::Status(grpc::StatusCode::CANCELLED,
                              "cancelled before the planner got to it"));
          return;
        }
        absl::StatusOr<Response> result = (handler_.*call)(*request);
        if (result.ok()) *response = *std::move(result);
        Finish(reactor, method, start, ToGrpcStatus(result.status()));
      });
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPlannerService::RegisterWorker(
    grpc::CallbackServerContext* context,
    const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  return Serve("RegisterWorker", context, request, response,
               &PlannerHandler::RegisterWorker);
}

grpc::ServerUnaryReactor* GrpcPlannerService::SubmitProfile(
    grpc::CallbackServerContext* context,
    const v1::SubmitProfileRequest* request,
    v1::SubmitProfileResponse* response) {
  return Serve("SubmitProfile", context, request, response,
               &PlannerHandler::SubmitProfile);
}

grpc::ServerUnaryReactor* GrpcPlannerService::SubmitBatches(
    grpc::CallbackServerContext* context,
    const v1::SubmitBatchesRequest* request,
    v1::SubmitBatchesResponse* response) {
  return Serve("SubmitBatches", context, request, response,
               &PlannerHandler::SubmitBatches);
}

grpc::ServerUnaryReactor* GrpcPlannerService::GetPlan(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  static constexpr char kMethod[] = "GetPlan";
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time start = clock_.Now();
  grpc::Status authenticated = Authenticate(*context);
  if (!authenticated.ok()) {
    Finish(reactor, kMethod, start, authenticated);
    return reactor;
  }
  plan_call_threads_->Schedule([this, context, request, response, reactor,
                                start] {
    if (context->IsCancelled()) {
      Finish(reactor, kMethod, start,
             grpc::Status(grpc::StatusCode::CANCELLED,
                          "cancelled before the planner got to it"));
      return;
    }
    // Deserialize consumes its buffer; the copy shares the request's slices.
    grpc::ByteBuffer request_bytes(*request);
    v1::GetPlanRequest parsed;
    if (!grpc::SerializationTraits<v1::GetPlanRequest>::Deserialize(
             &request_bytes, &parsed)
             .ok()) {
      Finish(reactor, kMethod, start,
             grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "GetPlan request is not a dcp.v1.GetPlanRequest"));
      return;
    }
    absl::StatusOr<std::shared_ptr<const std::string>> serialized =
        handler_.GetSerializedPlan(parsed);
    if (serialized.ok()) *response = SharedByteBuffer(*std::move(serialized));
    Finish(reactor, kMethod, start, ToGrpcStatus(serialized.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPlannerService::ReportStepStats(
    grpc::CallbackServerContext* context,
    const v1::ReportStepStatsRequest* request,
    v1::ReportStepStatsResponse* response) {
  return Serve("ReportStepStats", context, request, response,
               &PlannerHandler::ReportStepStats);
}

grpc::ServerUnaryReactor* GrpcPlannerService::GetClusterModel(
    grpc::CallbackServerContext* context,
    const v1::GetClusterModelRequest* request,
    v1::GetClusterModelResponse* response) {
  return Serve("GetClusterModel", context, request, response,
               &PlannerHandler::GetClusterModel);
}

grpc::ServerUnaryReactor* GrpcPlannerService::ListWorkers(
    grpc::CallbackServerContext* context, const v1::ListWorkersRequest* request,
    v1::ListWorkersResponse* response) {
  return Serve("ListWorkers", context, request, response,
               &PlannerHandler::ListWorkers);
}

}  // namespace dcp
