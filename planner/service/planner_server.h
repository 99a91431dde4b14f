#ifndef DCP_PLANNER_SERVICE_PLANNER_SERVER_H_
#define DCP_PLANNER_SERVICE_PLANNER_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "planner/service/planner_handler.h"
#include "planner/service/planner_metrics.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace dcp {

class GrpcPlannerService;
class PrometheusPlannerMetrics;

/// The largest message the server sends or accepts: a 4,096-GPU plan with
/// tens of thousands of sequences is a few MiB.
inline constexpr int kPlannerMaxMessageBytes = 64 << 20;

/// The planner process: a PlannerHandler served over gRPC (dcp.v1.Planner
/// plus the standard grpc.health.v1 service, SERVING from the start and for
/// "dcp.v1.Planner"), with its metrics exposed to Prometheus over HTTP.
/// Start it in a test on port 0 and read port().
///
/// Thread-safe: Shutdown() and Wait() may be called from any thread.
class PlannerServer {
 public:
  /// Threads serving GET /metrics: each idle or slow client holds one until
  /// it sends its request or kMetricsRequestTimeout passes, so this many may
  /// stall at once while scrapes still get through.
  static constexpr int kMetricsThreads = 16;
  /// How long a /metrics client may take to send its request (and to read
  /// the answer) before it is dropped.
  static constexpr absl::Duration kMetricsRequestTimeout = absl::Seconds(2);

  /// Server-side TLS. All empty: plaintext.
  struct TlsOptions {
    /// PEM files of the server's certificate chain and private key.
    std::string cert_file;
    std::string key_file;
    /// PEM file of the CA that signs client certificates. Set: mutual TLS,
    /// clients without a certificate it signed are refused.
    std::string client_ca_file;
  };

  struct Options {
    /// host:port for gRPC; port 0 picks a free port (see port()).
    std::string listen_address = "127.0.0.1:0";
    /// host:port for Prometheus' GET /metrics; port 0 picks a free port
    /// (see metrics_port()); empty disables it.
    std::string metrics_address = "127.0.0.1:0";
    TlsOptions tls;
    /// When set, every dcp.v1.Planner call must send
    /// `authorization: Bearer <token>` (the health service needs none).
    std::string bearer_token;
    PlannerHandlerOptions handler;
    /// Threads running handler calls other than GetPlan, and GetPlan's own
    /// (see GrpcPlannerServiceOptions).
    int call_threads = 16;
    int plan_call_threads = 16;
  };

  /// Makes a handler; PlannerHandler::Create by default, a fake in tests.
  using HandlerFactory =
      std::function<absl::StatusOr<std::unique_ptr<PlannerHandler>>(
          PlannerHandlerOptions options, const Clock& clock,
          PlannerMetrics* metrics,
          std::function<void(const std::string&)> log)>;

  /// Creates the handler (loading `options.handler.state_dir`), then starts
  /// serving. `clock` must outlive the server; `log` gets the handler's
  /// lines and may be called from any thread. Errors: the handler's, an
  /// unreadable TLS file (naming it), or UNAVAILABLE for an address that
  /// cannot be bound.
  static absl::StatusOr<std::unique_ptr<PlannerServer>> Start(
      Options options, const Clock& clock,
      std::function<void(const std::string&)> log);
  /// Same, with the handler from `make_handler`.
  static absl::StatusOr<std::unique_ptr<PlannerServer>> Start(
      Options options, const Clock& clock,
      std::function<void(const std::string&)> log,
      const HandlerFactory& make_handler);

  /// The handler's RecordJob(): call once the planner has started (its
  /// ports announced), so that a failed start leaves no job record.
  absl::Status RecordJob() { return handler_->RecordJob(); }

  /// Shuts down with no drain time if Shutdown() was not called.
  ~PlannerServer();

  PlannerServer(const PlannerServer&) = delete;
  PlannerServer& operator=(const PlannerServer&) = delete;

  /// The bound gRPC port.
  int port() const { return port_; }
  /// The bound metrics port; 0 when metrics are disabled.
  int metrics_port() const { return metrics_port_; }

  /// Reports NOT_SERVING, stops accepting calls, lets calls in flight finish
  /// for up to `drain_deadline` (then cancels them and abandons the plans
  /// in flight: it returns soon after the deadline however long a plan
  /// takes), stops the handler's background work and the metrics endpoint
  /// (at once: metrics are not served during the drain). gRPC's graceful shutdown also waits, up to the
  /// deadline, for idle client connections to acknowledge it (an idle gRPC
  /// C++ client answers within about 5 s). Idempotent; a later call waits
  /// for the first to finish.
  void Shutdown(absl::Duration drain_deadline);
  /// Blocks until Shutdown() has finished.
  void Wait();

 private:
  PlannerServer() = default;

  std::function<void(const std::string&)> log_;
  std::unique_ptr<PrometheusPlannerMetrics> metrics_;
  std::unique_ptr<PlannerHandler> handler_;
  std::unique_ptr<GrpcPlannerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  int metrics_port_ = 0;

  absl::Mutex mutex_;
  /// Set by the first Shutdown() on entry (later calls return at once).
  bool shutting_down_ ABSL_GUARDED_BY(mutex_) = false;
  /// Set when that Shutdown() has finished.
  bool shut_down_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PLANNER_SERVER_H_
