#include "planner/client/planner_client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/pem_check.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/channel_arguments.h"

namespace dcp {
namespace {

/// Plaintext when `tls` names no CA, else TLS (with a client certificate
/// when one is given).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const GrpcPlannerClient::TlsOptions& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a client certificate needs both its file and its key; got "
        "cert_file='",
        tls.cert_file, "', key_file='", tls.key_file, "'"));
  }
  if (tls.root_ca_file.empty()) {
    if (!tls.cert_file.empty()) {
      return absl::InvalidArgumentError(
          "a client certificate is only sent over TLS; set root_ca_file to "
          "the CA that signed the planner's certificate");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> root_ca =
      ReadPemCertificates("planner CA", tls.root_ca_file);
  if (!root_ca.ok()) return root_ca.status();
  ssl.pem_root_certs = *std::move(root_ca);
  if (!tls.cert_file.empty()) {
    absl::StatusOr<PemKeyPair> pair = ReadPemKeyPair(
        "client certificate", tls.cert_file, "client key", tls.key_file);
    if (!pair.ok()) return pair.status();
    ssl.pem_cert_chain = std::move(pair->cert_chain);
    ssl.pem_private_key = std::move(pair->private_key);
  }
  return grpc::SslCredentials(ssl);
}

/// True for gRPC's messages of a failed TLS handshake (a certificate that
/// does not verify, a wrong name, an expired certificate, TLS against a
/// plaintext server): retrying cannot succeed.
bool IsTlsHandshakeFailure(absl::string_view message) {
  const std::string lower = absl::AsciiStrToLower(message);
  for (absl::string_view marker :
       {"handshake failed", "ssl_error_ssl", "is not in peer certificate",
        "certificate verify failed", "certificate_verify_failed",
        "wrong version number", "wrong_version_number"}) {
    if (absl::StrContains(lower, marker)) return true;
  }
  return false;
}

absl::Status ValidateRetryPolicy(const GrpcPlannerClient::RetryPolicy& retry) {
  if (retry.max_attempts < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "retry.max_attempts must be at least 1 (the first attempt), got ",
        retry.max_attempts));
  }
  if (retry.initial_backoff < absl::ZeroDuration() ||
      retry.max_backoff < retry.initial_backoff) {
    return absl::InvalidArgumentError(absl::StrCat(
        "retry backoffs must satisfy 0 <= initial_backoff <= max_backoff; "
        "got initial_backoff=",
        absl::FormatDuration(retry.initial_backoff),
        ", max_backoff=", absl::FormatDuration(retry.max_backoff)));
  }
  if (retry.outage_tolerance < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("retry.outage_tolerance must be >= 0 (0: max_attempts "
                     "only), got ",
                     absl::FormatDuration(retry.outage_tolerance)));
  }
  if (!(retry.multiplier >= 1.0) || !(retry.jitter >= 0.0) ||
      !(retry.jitter < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "retry.multiplier must be >= 1 and retry.jitter in [0, 1); got "
        "multiplier=",
        retry.multiplier, ", jitter=", retry.jitter));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode both number the canonical codes
  // 0..16 identically.
  const int code = static_cast<int>(status.error_code());
  const absl::StatusCode absl_code =
      code >= 0 && code <= static_cast<int>(absl::StatusCode::kUnauthenticated)
          ? static_cast<absl::StatusCode>(code)
          : absl::StatusCode::kUnknown;
  return absl::Status(absl_code, status.error_message());
}

absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> GrpcPlannerClient::Create(
    Options options) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError(
        "the planner's target is empty; give its host:port (e.g. "
        "dcp-planner:50051)");
  }
  if (options.call_deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("call_deadline must be positive, got ",
                     absl::FormatDuration(options.call_deadline)));
  }
  if (absl::Status valid = ValidateRetryPolicy(options.retry); !valid.ok()) {
    return valid;
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();

  grpc::ChannelArguments arguments;
  // The client trusts its planner: plans for thousands of GPUs are large.
  arguments.SetMaxReceiveMessageSize(-1);
  // gRPC's own reconnect backoff grows to two minutes by default, which
  // would make later attempts fail without trying; keep it within the
  // retry policy's, and at most a second, so that a restarted planner is
  // found soon after it serves (each retry also resets it, see Call).
  const int initial_backoff_ms = std::max<int>(
      1, static_cast<int>(
             absl::ToInt64Milliseconds(options.retry.initial_backoff)));
  const int max_backoff_ms = std::max<int>(
      initial_backoff_ms,
      static_cast<int>(std::min<int64_t>(
          1000, absl::ToInt64Milliseconds(options.retry.max_backoff))));
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, initial_backoff_ms);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, initial_backoff_ms);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_backoff_ms);
  if (!options.tls.server_name_override.empty()) {
    arguments.SetSslTargetNameOverride(options.tls.server_name_override);
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      options.target, *std::move(credentials), arguments);
  return absl::WrapUnique(
      new GrpcPlannerClient(std::move(options), std::move(channel)));
}

GrpcPlannerClient::GrpcPlannerClient(Options options,
                                     std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock::Get()),
      channel_(std::move(channel)),
      stub_(v1::Planner::NewStub(channel_)),
      get_plan_path_(
          absl::StrCat("/", v1::Planner::service_full_name(), "/GetPlan")),
      get_plan_method_(get_plan_path_.c_str(),
                       grpc::internal::RpcMethod::NORMAL_RPC, channel_),
      rng_(options_.retry.seed) {}

bool GrpcPlannerClient::StopRequested() const {
  return options_.stop_requested && options_.stop_requested();
}

int64_t GrpcPlannerClient::attempts() const {
  absl::MutexLock lock(&mutex_);
  return attempts_;
}

absl::Duration GrpcPlannerClient::Backoff(int next_attempt) {
  const RetryPolicy& retry = options_.retry;
  const double base_seconds =
      std::min(absl::ToDoubleSeconds(retry.initial_backoff) *
                   std::pow(retry.multiplier, next_attempt - 2),
               absl::ToDoubleSeconds(retry.max_backoff));
  double unit;  // Uniform in [0, 1).
  {
    absl::MutexLock lock(&mutex_);
    unit = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  }
  const double factor = 1.0 + retry.jitter * (2.0 * unit - 1.0);
  return absl::Seconds(base_seconds * factor);
}

template <typename Response>
absl::StatusOr<Response> GrpcPlannerClient::Call(
    absl::string_view method,
    absl::FunctionRef<grpc::Status(grpc::ClientContext*, Response*)> attempt) {
  // Waits are logged at the first retry, then at most once per kLogEvery.
  constexpr absl::Duration kLogEvery = absl::Seconds(10);
  const absl::Time start = clock_.Now();
  absl::Duration last_logged = absl::ZeroDuration();
  grpc::Status status;
  int attempt_number = 0;
  while (true) {
    ++attempt_number;
    {
      absl::MutexLock lock(&mutex_);
      ++attempts_;
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoNanoseconds(options_.call_deadline));
    if (!options_.bearer_token.empty()) {
      context.AddMetadata("authorization",
                          absl::StrCat("Bearer ", options_.bearer_token));
    }
    Response response;
    const absl::Time attempt_start = clock_.Now();
    status = attempt(&context, &response);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        IsTlsHandshakeFailure(status.error_message())) {
      // Not an outage: retrying cannot fix a certificate.
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: the TLS handshake with the planner at %s failed, which is a "
          "configuration error, not an outage: %s. Check that the planner "
          "serves TLS, that the client's CA (root_ca_file, dcp_worker "
          "--tls-ca) signed the planner's certificate, that the "
          "certificate is for the name the client connects to "
          "(server_name_override, --tls-server-name) and has not "
          "expired",
          method, options_.target, status.error_message()));
    }
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) {
      {
        absl::MutexLock lock(&mutex_);
        outage_start_.reset();
      }
      if (attempt_number > 1 && options_.log) {
        options_.log(absl::StrFormat(
            "%s: planner at %s answered again (%s) after %.1f s unavailable "
            "(%d attempts)",
            method, options_.target, status.ok() ? "OK" : "an error",
            absl::ToDoubleSeconds(clock_.Now() - start), attempt_number));
      }
      if (status.ok()) return response;
      break;
    }
    absl::Duration unavailable_for;
    {
      absl::MutexLock lock(&mutex_);
      if (!outage_start_.has_value()) outage_start_ = attempt_start;
      unavailable_for = clock_.Now() - *outage_start_;
    }
    if (attempt_number >= options_.retry.max_attempts &&
        unavailable_for >= options_.retry.outage_tolerance) {
      break;
    }
    const absl::Duration backoff = Backoff(attempt_number + 1);
    if (options_.log && (attempt_number == 1 ||
                         unavailable_for - last_logged >= kLogEvery)) {
      last_logged = unavailable_for;
      options_.log(absl::StrFormat(
          "%s: planner at %s unavailable for %.1f s (attempt %d); waiting "
          "for it (gives up after %d attempts and %s): %s",
          method, options_.target, absl::ToDoubleSeconds(unavailable_for),
          attempt_number, options_.retry.max_attempts,
          absl::FormatDuration(options_.retry.outage_tolerance),
          status.error_message()));
    }
    if (StopRequested()) break;
    if (options_.sleep) {
      options_.sleep(backoff);
    } else {
      for (absl::Duration left = backoff;
           left > absl::ZeroDuration() && !StopRequested();
           left -= kStopPollInterval) {
        absl::SleepFor(std::min(left, kStopPollInterval));
      }
    }
    if (StopRequested()) break;
    // The channel may be in its own reconnect backoff, in which the next
    // attempt would fail without trying to connect.
    grpc::experimental::ChannelResetConnectionBackoff(channel_.get());
  }
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      if (StopRequested()) {
        return absl::CancelledError(absl::StrFormat(
            "%s: stopped on request while waiting for the planner at %s "
            "(unavailable for %.1f s, %d attempt%s): %s",
            method, options_.target,
            absl::ToDoubleSeconds(clock_.Now() - start), attempt_number,
            attempt_number == 1 ? "" : "s", status.error_message()));
      }
      return absl::UnavailableError(absl::StrFormat(
          "planner at %s unavailable after %d attempt%s over %.1f s: %s",
          options_.target, attempt_number, attempt_number == 1 ? "" : "s",
          absl::ToDoubleSeconds(clock_.Now() - start), status.error_message()));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(absl::StrFormat(
          "%s to planner at %s got no answer within its %s deadline "
          "(GrpcPlannerClient::Options::call_deadline): %s",
          method, options_.target, absl::FormatDuration(options_.call_deadline),
          status.error_message()));
    default:
      return FromGrpcStatus(status);
  }
}

template <typename Request, typename Response>
absl::StatusOr<Response> GrpcPlannerClient::CallStub(
    absl::string_view method,
    grpc::Status (v1::Planner::Stub::*rpc)(grpc::ClientContext*, const Request&,
                                           Response*),
    const Request& request) {
  return Call<Response>(
      method, [&](grpc::ClientContext* context, Response* response) {
        return (stub_.get()->*rpc)(context, request, response);
      });
}

absl::StatusOr<v1::RegisterWorkerResponse> GrpcPlannerClient::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  return CallStub("RegisterWorker", &v1::Planner::Stub::RegisterWorker,
                  request);
}

absl::StatusOr<v1::SubmitProfileResponse> GrpcPlannerClient::SubmitProfile(
    const v1::SubmitProfileRequest& request) {
  return CallStub("SubmitProfile", &v1::Planner::Stub::SubmitProfile, request);
}

absl::StatusOr<v1::SubmitBatchesResponse> GrpcPlannerClient::SubmitBatches(
    const v1::SubmitBatchesRequest& request) {
  return CallStub("SubmitBatches", &v1::Planner::Stub::SubmitBatches, request);
}

absl::StatusOr<v1::GetPlanResponse> GrpcPlannerClient::GetPlan(
    const v1::GetPlanRequest& request) {
  return CallStub("GetPlan", &v1::Planner::Stub::GetPlan, request);
}

absl::StatusOr<std::string> GrpcPlannerClient::GetSerializedPlan(
    const v1::GetPlanRequest& request) {
  return Call<std::string>("GetPlan", [&](grpc::ClientContext* context,
                                          std::string* serialized) {
    grpc::ByteBuffer buffer;
    grpc::Status status =
        grpc::internal::BlockingUnaryCall<v1::GetPlanRequest, grpc::ByteBuffer,
                                          grpc::protobuf::MessageLite,
                                          grpc::ByteBuffer>(
            channel_.get(), get_plan_method_, context, request, &buffer);
    if (!status.ok()) return status;
    std::vector<grpc::Slice> slices;
    if (!buffer.Dump(&slices).ok()) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "cannot read the GetPlan response's bytes");
    }
    serialized->clear();
    serialized->reserve(buffer.Length());
    for (const grpc::Slice& slice : slices) {
      serialized->append(reinterpret_cast<const char*>(slice.begin()),
                         slice.size());
    }
    return status;
  });
}

absl::StatusOr<v1::ReportStepStatsResponse> GrpcPlannerClient::ReportStepStats(
    const v1::ReportStepStatsRequest& request) {
  return CallStub("ReportStepStats", &v1::Planner::Stub::ReportStepStats,
                  request);
}

absl::StatusOr<v1::GetClusterModelResponse> GrpcPlannerClient::GetClusterModel(
    const v1::GetClusterModelRequest& request) {
  return CallStub("GetClusterModel", &v1::Planner::Stub::GetClusterModel,
                  request);
}

absl::StatusOr<v1::ListWorkersResponse> GrpcPlannerClient::ListWorkers(
    const v1::ListWorkersRequest& request) {
  return CallStub("ListWorkers", &v1::Planner::Stub::ListWorkers, request);
}

}  // namespace dcp
