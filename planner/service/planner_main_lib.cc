#include "planner/service/planner_main_lib.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/command_line.h"
#include "common/process_support.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/model_spec.h"
#include "planner/service/planner_handler.h"
#include "planner/service/planner_server.h"

namespace dcp {
namespace {

constexpr char kTokenEnvironmentVariable[] = "DCP_PLANNER_TOKEN";

constexpr FlagSpec kFlags[] = {
    {"listen", "HOST:PORT", "0.0.0.0:50051",
     "gRPC address (port 0 picks a free port)"},
    {"metrics-listen", "HOST:PORT", "0.0.0.0:9464",
     "Prometheus GET /metrics address; empty disables metrics"},
    {"model", "NAME|FILE", "tiny",
     "model preset (llama3-8b, llama3-70b, video-dit-1b, tiny) or a "
     "ModelSpec JSON file"},
    {"cluster", "FILE", "",
     "ClusterSpec JSON (cost_model/cluster_spec.h field names over the H200 "
     "defaults, e.g. a small CPU cluster); --nodes, --gpus-per-node and "
     "--memory-fraction override it when given"},
    {"nodes", "N", "1", "nodes in the training job"},
    {"gpus-per-node", "N", "8", "ranks per node"},
    {"memory-fraction", "F", "0.8",
     "fraction of each GPU's memory plans may use, in (0, 1]"},
    {"state-dir", "DIR", "",
     "directory for state that survives a restart (registrations, fitted "
     "parameters, planned steps); empty keeps it in memory"},
    {"online-refit", nullptr, "false",
     "refit the compute model from the workers' measured step times"},
    {"tls-cert", "FILE", "", "server certificate chain (PEM); enables TLS"},
    {"tls-key", "FILE", "", "server private key (PEM)"},
    {"tls-client-ca", "FILE", "",
     "CA of client certificates (PEM); enables mutual TLS"},
    {"token-file", "FILE", "",
     "file holding the bearer token clients must send (e.g. a mounted "
     "Kubernetes Secret); else $DCP_PLANNER_TOKEN; else no token"},
    {"planning-threads", "N", "1",
     "threads planning submitted batches ahead, at most 64; 0 plans on "
     "demand only"},
    {"liveness-timeout", "DURATION", "60s",
     "a worker silent this long is reported LOST (e.g. 30s, 2m)"},
    {"drain-timeout", "DURATION", "10s",
     "on SIGTERM/SIGINT, how long calls in flight may take to finish"},
};

std::string PlannerUsage() {
  return dcp::Usage(
      "dcp_planner",
      "dcp_planner: the DCP planner service. Workers register, submit "
      "profiles, fetch each step's plan and report step times over gRPC "
      "(dcp.v1.Planner, plus grpc.health.v1).",
      kFlags,
      "Prints \"dcp_planner listening on HOST:PORT, metrics on HOST:PORT\" "
      "once serving.\nSIGTERM or SIGINT drains calls in flight and exits "
      "0.\n");
}

absl::StatusOr<PlannerServer::Options> ServerOptions(const ParsedFlags& flags) {
  PlannerServer::Options options;
  options.listen_address = flags.String("listen");
  options.metrics_address = flags.String("metrics-listen");
  if (options.listen_address.empty()) {
    return absl::InvalidArgumentError(
        "--listen is empty; give HOST:PORT, e.g. 0.0.0.0:50051");
  }

  absl::StatusOr<ModelSpec> model = LoadModelSpec(flags.String("model"));
  if (!model.ok()) return model.status();
  absl::StatusOr<int> nodes = flags.Int32("nodes", 1, 1 << 14);
  if (!nodes.ok()) return nodes.status();
  absl::StatusOr<int> gpus_per_node = flags.Int32("gpus-per-node", 1, 64);
  if (!gpus_per_node.ok()) return gpus_per_node.status();
  ClusterSpec cluster = H200Cluster(*nodes, *gpus_per_node);
  if (flags.Given("cluster")) {
    const std::string path = flags.String("cluster");
    std::ifstream file(path, std::ios::binary);
    if (!file) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cluster=", path, ": cannot read the file"));
    }
    std::ostringstream contents;
    contents << file.rdbuf();
    absl::StatusOr<ClusterSpec> from_file = ClusterSpecFromJson(contents.str());
    if (!from_file.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cluster=", path, ": ", from_file.status().message()));
    }
    cluster = *from_file;
    if (flags.Given("nodes")) cluster.num_nodes = *nodes;
    if (flags.Given("gpus-per-node")) cluster.gpus_per_node = *gpus_per_node;
  }
  if (!flags.Given("cluster") || flags.Given("memory-fraction")) {
    absl::StatusOr<double> fraction = flags.Double(
        "memory-fraction", /*min=*/0, /*max=*/1, /*min_exclusive=*/true);
    if (!fraction.ok()) return fraction.status();
    cluster.usable_memory_fraction = *fraction;
  }
  if (absl::Status valid = ValidateClusterSpec(cluster); !valid.ok()) {
    return valid;
  }
  options.handler.model = *std::move(model);
  options.handler.cluster = cluster;
  options.handler.state_dir = flags.String("state-dir");
  absl::StatusOr<bool> online_refit = flags.Bool("online-refit");
  if (!online_refit.ok()) return online_refit.status();
  options.handler.online_refit = *online_refit;
  absl::StatusOr<int> planning_threads =
      flags.Int32("planning-threads", 0, kMaxBackgroundPlanningThreads);
  if (!planning_threads.ok()) return planning_threads.status();
  options.handler.background_planning_threads = *planning_threads;
  absl::StatusOr<absl::Duration> liveness = flags.Duration("liveness-timeout");
  if (!liveness.ok()) return liveness.status();
  options.handler.worker_liveness_timeout = *liveness;

  options.tls.cert_file = flags.String("tls-cert");
  options.tls.key_file = flags.String("tls-key");
  options.tls.client_ca_file = flags.String("tls-client-ca");
  if (options.tls.cert_file.empty() != options.tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together: give both or neither");
  }
  if (!options.tls.client_ca_file.empty() && options.tls.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)");
  }
  absl::StatusOr<std::string> token = LoadBearerToken(flags);
  if (!token.ok()) return token.status();
  options.bearer_token = *std::move(token);
  return options;
}

/// `address` (host:port) with its port replaced by `port`.
std::string WithPort(const std::string& address, int port) {
  const size_t colon = address.rfind(':');
  const std::string host =
      colon == std::string::npos ? address : address.substr(0, colon);
  return absl::StrCat(host, ":", port);
}

}  // namespace

int RunPlannerMain(int argc, char** argv) {
  absl::StatusOr<ParsedFlags> parsed = ParseFlags(argc, argv, kFlags);
  if (!parsed.ok()) {
    std::fprintf(stderr, "dcp_planner: %s\n",
                 std::string(parsed.status().message()).c_str());
    return kPlannerMainUsageError;
  }
  if (parsed->help()) {
    std::fputs(PlannerUsage().c_str(), stdout);
    std::fflush(stdout);
    return kPlannerMainOk;
  }
  const ParsedFlags& flags = *parsed;
  absl::StatusOr<PlannerServer::Options> options = ServerOptions(flags);
  absl::StatusOr<absl::Duration> drain_timeout =
      flags.Duration("drain-timeout");
  if (options.ok() && !drain_timeout.ok()) options = drain_timeout.status();
  if (!options.ok()) {
    std::fprintf(stderr, "dcp_planner: %s\n",
                 std::string(options.status().message()).c_str());
    return kPlannerMainUsageError;
  }
  if (options->bearer_token.empty()) {
    LogLine(absl::StrCat("no bearer token (--token-file or $",
                         kTokenEnvironmentVariable, "): anyone who can reach ",
                         options->listen_address, " may call the planner"));
  }

  // Block the signals before the server starts its threads, so that they
  // inherit the mask and only sigwait() below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const std::string listen_address = options->listen_address;
  const std::string metrics_address = options->metrics_address;
  absl::StatusOr<std::unique_ptr<PlannerServer>> server =
      PlannerServer::Start(*std::move(options), RealClock::Get(), &LogLine);
  if (!server.ok()) {
    std::fprintf(stderr, "dcp_planner: %s\n",
                 server.status().ToString().c_str());
    return server.status().code() == absl::StatusCode::kInvalidArgument
               ? kPlannerMainUsageError
               : kPlannerMainFailure;
  }
  const std::string metrics_text =
      metrics_address.empty()
          ? std::string("metrics disabled")
          : absl::StrCat("metrics on ",
                         WithPort(metrics_address, (*server)->metrics_port()));
  std::printf("dcp_planner listening on %s, %s\n",
              WithPort(listen_address, (*server)->port()).c_str(),
              metrics_text.c_str());
  std::fflush(stdout);

  int signal_number = 0;
  while (sigwait(&stop_signals, &signal_number) != 0) {
  }
  LogLine(absl::StrCat("received ",
                       signal_number == SIGTERM ? "SIGTERM" : "SIGINT",
                       "; draining calls in flight for up to ",
                       absl::FormatDuration(*drain_timeout)));
  (*server)->Shutdown(*drain_timeout);
  LogLine("planner stopped");
  return kPlannerMainOk;
}

}  // namespace dcp
