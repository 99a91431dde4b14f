#ifndef DCP_PLANNER_SERVICE_PLANNER_CLIENT_H_
#define DCP_PLANNER_SERVICE_PLANNER_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "dcp/v1/planner_service.grpc.pb.h"
#include "dcp/v1/planner_service.pb.h"
#include "grpcpp/grpcpp.h"
#include "planner/client/planner_rpcs.h"

namespace dcp {

/// The planner as a worker sees it: one method per dcp.v1.Planner RPC.
/// GrpcPlannerClient talks to a real planner; FakePlannerClient
/// (fake_planner_client.h) lets tests decide the answers. Implementations are
/// thread-safe.
class PlannerClient : public PlannerRpcs {};

/// The absl::Status for a gRPC status: the same canonical code and message.
/// The one place the client converts grpc::Status to absl::Status.
absl::Status FromGrpcStatus(const grpc::Status& status);

/// A PlannerClient over gRPC. Every call has a deadline. Every dcp.v1.Planner
/// RPC is idempotent (ReportStepStats per (worker, step, rank)), so every
/// call is retried, but only on UNAVAILABLE (the planner is not reachable or
/// restarting), with exponential backoff and jitter: at least
/// `retry.max_attempts` attempts, and for as long as the planner has been
/// unavailable for less than `retry.outage_tolerance` (a planner pod restart
/// takes tens of seconds), logging each wait. Other errors come back at once
/// with the planner's code and message. Thread-safe.
class GrpcPlannerClient final : public PlannerClient {
 public:
  /// How often a wait between attempts polls Options::stop_requested.
  static constexpr absl::Duration kStopPollInterval = absl::Milliseconds(100);

  /// Client-side TLS. All empty: plaintext.
  struct TlsOptions {
    /// PEM file of the CA that signed the planner's certificate. Set: TLS.
    std::string root_ca_file;
    /// PEM files of this client's certificate chain and key, for a planner
    /// that requires mutual TLS. Both or neither.
    std::string cert_file;
    std::string key_file;
    /// Name to check the planner's certificate against instead of the
    /// target's host (e.g. when connecting by IP to a certificate for a DNS
    /// name). Empty: the target's host.
    std::string server_name_override;
  };

  struct RetryPolicy {
    /// Attempts per call in all, the first included (at least 1).
    int max_attempts = 5;
    /// Past `max_attempts`, a call keeps retrying while UNAVAILABLE until
    /// the planner has been unavailable this long: the planner outage the
    /// client rides through. The outage is the client's, across calls: it
    /// starts at the first UNAVAILABLE attempt and ends when the planner
    /// answers any call, so a call made during an outage that earlier calls
    /// already waited through makes only its `max_attempts`. Zero:
    /// `max_attempts` alone bounds the retries.
    absl::Duration outage_tolerance = absl::ZeroDuration();
    /// Wait before the second attempt; each later wait is `multiplier`
    /// times longer, up to `max_backoff`. Each wait is jittered uniformly by
    /// +-`jitter` of itself.
    absl::Duration initial_backoff = absl::Milliseconds(200);
    absl::Duration max_backoff = absl::Seconds(5);
    double multiplier = 2.0;
    double jitter = 0.2;
    /// Seeds the jitter's RNG.
    uint64_t seed = 0;
  };

  struct Options {
    /// The planner's host:port (any gRPC target, e.g. dns:///planner:50051).
    std::string target;
    TlsOptions tls;
    /// Sent as `authorization: Bearer <token>` when set.
    std::string bearer_token;
    /// Deadline of each attempt.
    absl::Duration call_deadline = absl::Seconds(10);
    RetryPolicy retry;
    /// Waits between attempts; absl::SleepFor when empty (in slices of at
    /// most kStopPollInterval, polling `stop_requested`). Tests inject a
    /// no-op.
    std::function<void(absl::Duration)> sleep;
    /// Polled while a call waits for an unavailable planner: when it says
    /// true the call stops waiting and returns CANCELLED ("stopped on
    /// request while waiting for the planner ..."), so that a worker told to
    /// stop (SIGTERM) is not held for the outage tolerance. Empty: never.
    std::function<bool()> stop_requested;
    /// Measures the time spent retrying (for `outage_tolerance` and the
    /// messages); the real clock when null. Must outlive the client.
    const Clock* clock = nullptr;
    /// Told, one line each, that a call waits for an unavailable planner
    /// (its address, how long it has been unavailable, the tolerance).
    /// Empty: silent. Called from the calling thread.
    std::function<void(const std::string&)> log;
  };

  /// Reads the TLS files and creates the channel (connecting lazily: a
  /// planner that is not up yet is not an error here). Errors:
  /// INVALID_ARGUMENT for an empty target, a bad retry policy or an
  /// unreadable TLS file (naming it).
  static absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> Create(
      Options options);

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) override;
  absl::StatusOr<v1::SubmitProfileResponse> SubmitProfile(
      const v1::SubmitProfileRequest& request) override;
  absl::StatusOr<v1::SubmitBatchesResponse> SubmitBatches(
      const v1::SubmitBatchesRequest& request) override;
  absl::StatusOr<v1::GetPlanResponse> GetPlan(
      const v1::GetPlanRequest& request) override;
  absl::StatusOr<v1::ReportStepStatsResponse> ReportStepStats(
      const v1::ReportStepStatsRequest& request) override;
  absl::StatusOr<v1::GetClusterModelResponse> GetClusterModel(
      const v1::GetClusterModelRequest& request) override;
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& request) override;

  /// GetPlan's response as the planner serialized it (a v1::GetPlanResponse
  /// in wire format), under the same deadline and retries.
  absl::StatusOr<std::string> GetSerializedPlan(
      const v1::GetPlanRequest& request);

  /// Attempts made by calls so far (for tests and logs).
  int64_t attempts() const;

 private:
  GrpcPlannerClient(Options options, std::shared_ptr<grpc::Channel> channel);

  /// Runs `attempt` (one RPC with a fresh context) under the retry policy.
  template <typename Response>
  absl::StatusOr<Response> Call(
      absl::string_view method,
      absl::FunctionRef<grpc::Status(grpc::ClientContext*, Response*)> attempt);
  /// Runs the stub's `rpc` with `request` under the retry policy.
  template <typename Request, typename Response>
  absl::StatusOr<Response> CallStub(
      absl::string_view method,
      grpc::Status (v1::Planner::Stub::*rpc)(grpc::ClientContext*,
                                             const Request&, Response*),
      const Request& request);
  /// The wait before attempt `next_attempt` (2, 3, ...), jittered.
  absl::Duration Backoff(int next_attempt);

  const Options options_;
  const Clock& clock_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Planner::Stub> stub_;
  /// GetPlan as the generated stub calls it, for GetSerializedPlan, which
  /// makes the same call but keeps the response as bytes.
  const std::string get_plan_path_;
  const grpc::internal::RpcMethod get_plan_method_;

  /// Options::stop_requested says stop.
  bool StopRequested() const;
  mutable absl::Mutex mutex_;
  /// Draws the backoff jitter; seeded with `options.retry.seed`.
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mutex_);
  int64_t attempts_ ABSL_GUARDED_BY(mutex_) = 0;
  /// When the planner's current outage began (its first UNAVAILABLE
  /// attempt since it last answered), if it is unavailable now.
  std::optional<absl::Time> outage_start_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PLANNER_CLIENT_H_
