#include "planner/service/grpc_planner_service.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/malloc_control.h"
#include "planner/service/wire_sample_count.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"

namespace dcp {
namespace {

constexpr char kAuthorizationKey[] = "authorization";

/// The longest a call carrying batches waits for the memory to parse them
/// while other calls hold theirs.
constexpr absl::Duration kCallMemoryWait = absl::Seconds(30);

/// Until when a call waits for its memory: its own deadline, and at most
/// kCallMemoryWait from now.
absl::Time CallMemoryDeadline(const grpc::CallbackServerContext& context) {
  return std::min(absl::FromChrono(context.deadline()),
                  absl::Now() + kCallMemoryWait);
}

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

/// INVALID_ARGUMENT: `size` bytes sent to `method` are not a `type`.
grpc::Status NotARequest(const char* method, size_t size,
                         const std::string& type) {
  return grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT,
      absl::StrCat(method, ": the request (", size,
                   " bytes) is not a serialized ", type,
                   "; send the message of proto/dcp/v1/planner_service.proto"));
}

/// `bytes` parsed as a `Request`, or INVALID_ARGUMENT naming `method`.
template <typename Request>
grpc::Status ParseRequest(const char* method, const grpc::ByteBuffer& bytes,
                          Request* parsed) {
  // Deserialize consumes its buffer; the copy shares the request's slices.
  grpc::ByteBuffer copy(bytes);
  const size_t size = copy.Length();
  if (!grpc::SerializationTraits<Request>::Deserialize(&copy, parsed).ok()) {
    return NotARequest(method, size, Request::descriptor()->full_name());
  }
  return grpc::Status::OK;
}

/// The token of an `authorization` value "<scheme> <token>" whose scheme is
/// "Bearer" in any case; nullopt for another scheme or form.
std::optional<absl::string_view> BearerToken(absl::string_view authorization) {
  constexpr absl::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()),
                              kScheme) ||
      authorization[kScheme.size()] != ' ') {
    return std::nullopt;
  }
  return absl::StripLeadingAsciiWhitespace(
      authorization.substr(kScheme.size()));
}

/// Who is calling, for the record: the peer's address without its port
/// ("ipv4:10.0.0.5"), and under (mutual) TLS the identity its certificate
/// proves.
std::string CallerIdentity(const grpc::CallbackServerContext& context) {
  std::string peer = context.peer();
  const size_t port = peer.rfind(':');
  const size_t scheme = peer.find(':');
  if (port != std::string::npos && port != scheme) peer.resize(port);
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    std::vector<std::string> names;
    for (const grpc::string_ref& name : auth->GetPeerIdentity()) {
      names.emplace_back(name.data(), name.size());
    }
    if (!names.empty()) {
      absl::StrAppend(&peer, " (TLS identity ", absl::StrJoin(names, ", "),
                      ")");
    }
  }
  return peer;
}

/// Requests that carry their caller get it here; others are left as sent.
template <typename Request>
void StampCaller(const grpc::CallbackServerContext&, Request*) {}
void StampCaller(const grpc::CallbackServerContext& context,
                 v1::RegisterWorkerRequest* request) {
  request->set_registered_by(CallerIdentity(context));
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
      bearer_token_(std::move(options.bearer_token)),
      call_threads_(std::make_unique<CallThreads>(options.call_threads)),
      plan_call_threads_(
          std::make_unique<CallThreads>(options.plan_call_threads)),
      call_memory_(options.call_memory_budget_bytes,
                   std::move(options.call_memory_budget_source)) {}

GrpcPlannerService::~GrpcPlannerService() { Shutdown(); }

void GrpcPlannerService::Shutdown() {
  call_threads_->Stop();
  plan_call_threads_->Stop();
}

grpc::Status GrpcPlannerService::Authenticate(
    const grpc::CallbackServerContext& context) const {
  if (bearer_token_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find(kAuthorizationKey);
  if (found == metadata.end()) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        "this planner requires 'authorization: Bearer <token>' metadata; "
        "give the client the planner's token (the planner reads it from "
        "--token-file or DCP_PLANNER_TOKEN)");
  }
  const std::optional<absl::string_view> given = BearerToken(
      absl::string_view(found->second.data(), found->second.size()));
  if (!given.has_value()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "'authorization' metadata is not 'Bearer <token>'");
  }
  if (!ConstantTimeEquals(*given, bearer_token_)) {
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
                        absl::ToDoubleSeconds(clock_.MonotonicNow() - start));
  reactor->Finish(status);
}

grpc::ServerUnaryReactor* GrpcPlannerService::Serve(
    const char* method, CallThreads& threads,
    grpc::CallbackServerContext* context, std::function<grpc::Status()> run) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time start = clock_.MonotonicNow();
  grpc::Status authenticated = Authenticate(*context);
  if (!authenticated.ok()) {
    Finish(reactor, method, start, authenticated);
    return reactor;
  }
  threads.Schedule([this, method, context, reactor, start,
                    run = std::move(run)] {
    if (context->IsCancelled()) {
      Finish(reactor, method, start,
             grpc::Status(grpc::StatusCode::CANCELLED,
                          "cancelled before the planner got to it"));
      return;
    }
    Finish(reactor, method, start, run());
  });
  return reactor;
}

grpc::Status GrpcPlannerService::ReserveCallMemory(
    const char* method, const std::string& request_type,
    const grpc::ByteBuffer& request, int batch_field, absl::Time deadline,
    CallMemoryBudget::Reservation* reservation) {
  if (call_memory_.budget_bytes() <= 0) return grpc::Status::OK;
  grpc::ByteBuffer copy(request);  // shares the request's slices
  std::optional<int64_t> samples;
  {
    grpc::ProtoBufferReader reader(&copy);
    samples = CountWireSamples(reader, batch_field);
  }
  if (!samples.has_value()) {
    return NotARequest(method, request.Length(), request_type);
  }
  if (*samples == 0) return grpc::Status::OK;
  absl::StatusOr<CallMemoryBudget::Reservation> reserved = call_memory_.Reserve(
      static_cast<int64_t>(request.Length()) + *samples * kParsedBytesPerSample,
      absl::StrCat(method, " of ", *samples, " samples"), deadline);
  if (!reserved.ok()) return ToGrpcStatus(reserved.status());
  *reservation = *std::move(reserved);
  return grpc::Status::OK;
}

template <typename Request>
grpc::Status GrpcPlannerService::WithParsedRequest(
    const char* method, const grpc::CallbackServerContext& context,
    const grpc::ByteBuffer& request, int batch_field,
    const std::function<grpc::Status(Request&)>& run) {
  CallMemoryBudget::Reservation reservation;
  if (batch_field != 0) {
    if (grpc::Status status = ReserveCallMemory(
            method, Request::descriptor()->full_name(), request, batch_field,
            CallMemoryDeadline(context), &reservation);
        !status.ok()) {
      return status;
    }
  }
  grpc::Status status;
  {
    Request parsed;
    status = ParseRequest(method, request, &parsed);
    if (status.ok()) status = run(parsed);
  }
  // The parsed request is freed: give a large one's pages back before its
  // bytes go back to the budget.
  if (reservation.bytes() >= kReleaseFreedMemoryAfterBytes) {
    ReleaseFreedMemory();
  }
  return status;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* GrpcPlannerService::ServeTyped(
    const char* method, grpc::CallbackServerContext* context,
    const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
    absl::StatusOr<Response> (PlannerRpcs::*call)(const Request&),
    int batch_field) {
  return Serve(method, *call_threads_, context,
               [this, method, context, request, response, call,
                batch_field]() -> grpc::Status {
                 return WithParsedRequest<Request>(
                     method, *context, *request, batch_field,
                     [&](Request& parsed) -> grpc::Status {
                       StampCaller(*context, &parsed);
                       absl::StatusOr<Response> result =
                           (handler_.*call)(parsed);
                       if (!result.ok()) return ToGrpcStatus(result.status());
                       bool own_buffer = false;
                       return grpc::SerializationTraits<Response>::Serialize(
                           *result, response, &own_buffer);
                     });
               });
}

grpc::ServerUnaryReactor* GrpcPlannerService::RegisterWorker(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeTyped("RegisterWorker", context, request, response,
                    &PlannerHandler::RegisterWorker);
}

grpc::ServerUnaryReactor* GrpcPlannerService::SubmitProfile(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeTyped("SubmitProfile", context, request, response,
                    &PlannerHandler::SubmitProfile);
}

grpc::ServerUnaryReactor* GrpcPlannerService::SubmitBatches(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeTyped("SubmitBatches", context, request, response,
                    &PlannerHandler::SubmitBatches, kSubmitBatchesBatchField);
}

grpc::ServerUnaryReactor* GrpcPlannerService::GetPlan(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  static constexpr char kMethod[] = "GetPlan";
  return Serve(kMethod, *plan_call_threads_, context,
               [this, context, request, response]() -> grpc::Status {
                 // A GetPlan carrying its batch waits its turn to parse it
                 // (every rank may send one at once).
                 return WithParsedRequest<v1::GetPlanRequest>(
                     kMethod, *context, *request, kGetPlanBatchField,
                     [&](v1::GetPlanRequest& parsed) -> grpc::Status {
                       absl::StatusOr<std::shared_ptr<const std::string>>
                           serialized = handler_.GetSerializedPlan(parsed);
                       if (!serialized.ok()) {
                         return ToGrpcStatus(serialized.status());
                       }
                       *response = SharedByteBuffer(*std::move(serialized));
                       return grpc::Status::OK;
                     });
               });
}

grpc::ServerUnaryReactor* GrpcPlannerService::ReportStepStats(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeTyped("ReportStepStats", context, request, response,
                    &PlannerHandler::ReportStepStats);
}

grpc::ServerUnaryReactor* GrpcPlannerService::GetClusterModel(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeTyped("GetClusterModel", context, request, response,
                    &PlannerHandler::GetClusterModel);
}

grpc::ServerUnaryReactor* GrpcPlannerService::ListWorkers(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeTyped("ListWorkers", context, request, response,
                    &PlannerHandler::ListWorkers);
}

}  // namespace dcp
