#include "planner/service/planner_server.h"

#include <chrono>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/pem_check.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "planner/service/grpc_planner_service.h"
#include "planner/service/prometheus_metrics.h"
#include "prometheus/exposer.h"

namespace dcp {
namespace {

/// The health-service name clients may check besides "" (the whole server).
constexpr char kPlannerServiceName[] = "dcp.v1.Planner";

/// Plaintext when `tls` is empty, else TLS (mutual when a client CA is set).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const PlannerServer::TlsOptions& tls) {
  if (tls.cert_file.empty() && tls.key_file.empty() &&
      tls.client_ca_file.empty()) {
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS needs both the server certificate and its key; got cert_file='",
        tls.cert_file, "', key_file='", tls.key_file, "'"));
  }
  grpc::SslServerCredentialsOptions ssl(
      tls.client_ca_file.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  // gRPC takes a garbage certificate or a mismatched key silently and then
  // fails to start, which would read as a port in use.
  absl::StatusOr<PemKeyPair> pair = ReadPemKeyPair(
      "server certificate", tls.cert_file, "server key", tls.key_file);
  if (!pair.ok()) return pair.status();
  grpc::SslServerCredentialsOptions::PemKeyCertPair key_cert;
  key_cert.private_key = std::move(pair->private_key);
  key_cert.cert_chain = std::move(pair->cert_chain);
  ssl.pem_key_cert_pairs.push_back(std::move(key_cert));
  if (!tls.client_ca_file.empty()) {
    absl::StatusOr<std::string> client_ca =
        ReadPemCertificates("client CA", tls.client_ca_file);
    if (!client_ca.ok()) return client_ca.status();
    ssl.pem_root_certs = *std::move(client_ca);
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PlannerServer>> PlannerServer::Start(
    Options options, const Clock& clock,
    std::function<void(const std::string&)> log) {
  return Start(std::move(options), clock, std::move(log),
               &PlannerHandler::Create);
}

absl::StatusOr<std::unique_ptr<PlannerServer>> PlannerServer::Start(
    Options options, const Clock& clock,
    std::function<void(const std::string&)> log,
    const HandlerFactory& make_handler) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();

  const int64_t memory_budget_bytes = options.handler.memory_budget_bytes;
  auto server = absl::WrapUnique(new PlannerServer());
  server->log_ = log ? std::move(log) : [](const std::string&) {};
  server->metrics_ = std::make_unique<PrometheusPlannerMetrics>();
  absl::StatusOr<std::unique_ptr<PlannerHandler>> handler = make_handler(
      std::move(options.handler), clock, server->metrics_.get(), server->log_);
  if (!handler.ok()) return handler.status();
  server->handler_ = *std::move(handler);

  GrpcPlannerServiceOptions service_options;
  service_options.bearer_token = options.bearer_token;
  service_options.call_threads = options.call_threads;
  service_options.plan_call_threads = options.plan_call_threads;
  service_options.call_memory_budget_bytes = memory_budget_bytes / 8;
  service_options.call_memory_budget_source =
      MemoryBudgetShareSource("an eighth", memory_budget_bytes);
  server->service_ = std::make_unique<GrpcPlannerService>(
      *server->handler_, *server->metrics_, clock, std::move(service_options));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, *std::move(credentials),
                           &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(kPlannerMaxMessageBytes);
  builder.SetMaxSendMessageSize(kPlannerMaxMessageBytes);
  // A second planner on the same port must fail, not share its traffic.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "the planner cannot listen on '", options.listen_address,
        "': the port is in use or the host is not an address of this "
        "machine (use host:port, e.g. 0.0.0.0:50051)"));
  }
  server->server_->GetHealthCheckService()->SetServingStatus(
      kPlannerServiceName, true);

  if (!options.metrics_address.empty()) {
    try {
      // civetweb gives each accepted connection a thread until its request
      // is read: with prometheus-cpp's default of 2 threads and civetweb's
      // 30 s request timeout, two idle sockets blocked every scrape. Enough
      // threads for many idle or slow clients at once, and a client that
      // has not sent its request within the timeout is dropped.
      server->exposer_ = std::make_unique<prometheus::Exposer>(
          std::vector<std::string>{
              "listening_ports", options.metrics_address,  //
              "num_threads", absl::StrCat(kMetricsThreads),
              "request_timeout_ms",
              absl::StrCat(absl::ToInt64Milliseconds(kMetricsRequestTimeout)),
              "enable_keep_alive", "no"});
    } catch (const std::exception& error) {
      return absl::UnavailableError(absl::StrCat(
          "the planner cannot serve metrics on '", options.metrics_address,
          "': ", error.what(),
          " (the port is in use or the host is not an address of this "
          "machine; an empty address disables metrics)"));
    }
    server->exposer_->RegisterCollectable(server->metrics_->registry());
    const std::vector<int> ports = server->exposer_->GetListeningPorts();
    if (ports.empty()) {
      return absl::UnavailableError(
          absl::StrCat("the planner's metrics endpoint on '",
                       options.metrics_address, "' has no listening port"));
    }
    server->metrics_port_ = ports.front();
  }
  return server;
}

PlannerServer::~PlannerServer() { Shutdown(absl::ZeroDuration()); }

void PlannerServer::Shutdown(absl::Duration drain_deadline) {
  {
    absl::MutexLock lock(&mutex_);
    if (shutting_down_) {
      mutex_.Await(absl::Condition(&shut_down_));
      return;
    }
    shutting_down_ = true;
  }
  // The metrics endpoint takes about two seconds to stop (civetweb's poll
  // quantum); stop it while the calls drain.
  std::thread stop_metrics([this] { exposer_.reset(); });
  // At the deadline (or once the calls have drained, if sooner) the
  // handler abandons the plans in flight, so that calls waiting for one
  // finish (UNAVAILABLE) and gRPC's shutdown, which waits for every call,
  // returns: a plan that takes longer than the drain never holds SIGTERM.
  // Real time, as gRPC's own deadline, whatever clock the handler is given.
  absl::Notification drained;
  std::thread abandon_planning([this, &drained, drain_deadline] {
    drained.WaitForNotificationWithTimeout(drain_deadline);
    if (handler_ != nullptr) handler_->Shutdown();
  });
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoNanoseconds(drain_deadline));
  }
  drained.Notify();
  abandon_planning.join();
  // Calls cancelled at the deadline may still be queued; they finish
  // before the call threads stop.
  if (service_ != nullptr) service_->Shutdown();
  stop_metrics.join();
  absl::MutexLock lock(&mutex_);
  shut_down_ = true;
}

void PlannerServer::Wait() {
  absl::MutexLock lock(&mutex_);
  mutex_.Await(absl::Condition(&shut_down_));
}

}  // namespace dcp
