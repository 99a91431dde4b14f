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

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/model_spec.h"
#include "planner/service/planner_server.h"

namespace dcp {
namespace {

constexpr char kTokenEnvironmentVariable[] = "DCP_PLANNER_TOKEN";

struct FlagSpec {
  const char* name;
  /// What the value is, for the usage text; nullptr for a boolean flag.
  const char* value_name;
  /// The default as text ("" for none).
  const char* default_value;
  const char* help;
};

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
     "threads planning submitted batches ahead; 0 plans on demand only"},
    {"liveness-timeout", "DURATION", "60s",
     "a worker silent this long is reported LOST (e.g. 30s, 2m)"},
    {"drain-timeout", "DURATION", "10s",
     "on SIGTERM/SIGINT, how long calls in flight may take to finish"},
};

const FlagSpec* FindFlag(absl::string_view name) {
  for (const FlagSpec& flag : kFlags) {
    if (name == flag.name) return &flag;
  }
  return nullptr;
}

std::string Usage() {
  std::string usage =
      "dcp_planner: the DCP planner service. Workers register, submit "
      "profiles, fetch each step's plan and report step times over gRPC "
      "(dcp.v1.Planner, plus grpc.health.v1).\n\n"
      "Usage: dcp_planner [--flag=value ...]\n\nFlags:\n";
  for (const FlagSpec& flag : kFlags) {
    const std::string name =
        flag.value_name == nullptr
            ? absl::StrCat("--", flag.name)
            : absl::StrCat("--", flag.name, "=", flag.value_name);
    absl::StrAppendFormat(&usage, "  %-30s %s", name, flag.help);
    if (flag.value_name != nullptr && flag.default_value[0] != '\0') {
      absl::StrAppend(&usage, " (default ", flag.default_value, ")");
    }
    absl::StrAppend(&usage, "\n");
  }
  absl::StrAppend(&usage,
                  "  --help                         print this help and exit\n"
                  "\nPrints \"dcp_planner listening on HOST:PORT, metrics on "
                  "HOST:PORT\" once serving.\nSIGTERM or SIGINT drains calls "
                  "in flight and exits 0.\n");
  return usage;
}

/// The flags given, by name (defaults not filled in), or a usage error.
/// Sets `*help` for --help.
absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ParseFlags(
    int argc, char** argv, bool* help) {
  absl::flat_hash_map<std::string, std::string> values;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view argument = argv[i];
    if (argument == "--help" || argument == "-h") {
      *help = true;
      continue;
    }
    if (!absl::StartsWith(argument, "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", argument,
                       "'; flags look like --name=value (see --help)"));
    }
    const absl::string_view body = argument.substr(2);
    const size_t equals = body.find('=');
    const absl::string_view name = body.substr(0, equals);
    const FlagSpec* flag = FindFlag(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    std::string value;
    if (equals != absl::string_view::npos) {
      value = std::string(body.substr(equals + 1));
    } else if (flag->value_name == nullptr) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " needs a value: --", name, "=", flag->value_name));
    }
    values[std::string(name)] = std::move(value);
  }
  return values;
}

/// Typed access to the parsed flags, with defaults from kFlags.
class Flags {
 public:
  explicit Flags(absl::flat_hash_map<std::string, std::string> values)
      : values_(std::move(values)) {}

  std::string String(const char* name) const {
    const auto found = values_.find(name);
    return found != values_.end() ? found->second
                                  : std::string(FindFlag(name)->default_value);
  }
  bool Given(const char* name) const { return values_.contains(name); }

  absl::StatusOr<int> Int(const char* name, int min, int max) const {
    const std::string text = String(name);
    int value = 0;
    if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--%s=%s: expected an integer in [%d, %d]", name, text, min, max));
    }
    return value;
  }

  absl::StatusOr<bool> Bool(const char* name) const {
    const std::string text = absl::AsciiStrToLower(String(name));
    if (text == "true" || text == "1" || text == "yes") return true;
    if (text == "false" || text == "0" || text == "no") return false;
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, "=", String(name), ": expected true or false"));
  }

  absl::StatusOr<absl::Duration> Duration(const char* name) const {
    const std::string text = String(name);
    absl::Duration value;
    if (!absl::ParseDuration(text, &value) || value <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", text,
                       ": expected a positive duration such as 30s or 2m"));
    }
    return value;
  }

 private:
  absl::flat_hash_map<std::string, std::string> values_;
};

/// The bearer token: --token-file's contents (trailing whitespace removed),
/// else $DCP_PLANNER_TOKEN, else empty.
absl::StatusOr<std::string> LoadToken(const Flags& flags) {
  if (flags.Given("token-file")) {
    const std::string path = flags.String("token-file");
    std::ifstream file(path, std::ios::binary);
    if (!file) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file=", path, ": cannot read the file"));
    }
    std::ostringstream contents;
    contents << file.rdbuf();
    std::string token(absl::StripAsciiWhitespace(contents.str()));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file=", path,
                       ": the file is empty; write the token "
                       "into it or drop the flag to run without a token"));
    }
    return token;
  }
  const char* from_environment = std::getenv(kTokenEnvironmentVariable);
  if (from_environment != nullptr) {
    return std::string(absl::StripAsciiWhitespace(from_environment));
  }
  return std::string();
}

absl::StatusOr<PlannerServer::Options> ServerOptions(const Flags& flags) {
  PlannerServer::Options options;
  options.listen_address = flags.String("listen");
  options.metrics_address = flags.String("metrics-listen");
  if (options.listen_address.empty()) {
    return absl::InvalidArgumentError(
        "--listen is empty; give HOST:PORT, e.g. 0.0.0.0:50051");
  }

  absl::StatusOr<ModelSpec> model = LoadModelSpec(flags.String("model"));
  if (!model.ok()) return model.status();
  absl::StatusOr<int> nodes = flags.Int("nodes", 1, 1 << 14);
  if (!nodes.ok()) return nodes.status();
  absl::StatusOr<int> gpus_per_node = flags.Int("gpus-per-node", 1, 64);
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
  const std::string fraction_text = flags.String("memory-fraction");
  if ((!flags.Given("cluster") || flags.Given("memory-fraction")) &&
      (!absl::SimpleAtod(fraction_text, &cluster.usable_memory_fraction) ||
       !(cluster.usable_memory_fraction > 0) ||
       cluster.usable_memory_fraction > 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory-fraction=", fraction_text, ": expected a number in (0, 1]"));
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
  absl::StatusOr<int> planning_threads = flags.Int("planning-threads", 0, 256);
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
  absl::StatusOr<std::string> token = LoadToken(flags);
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

/// One stderr line with a UTC timestamp. Thread-safe (one stdio call).
void LogLine(const std::string& line) {
  const std::string stamped = absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", RealClock::Get().Now(),
                       absl::UTCTimeZone()),
      " ", line, "\n");
  std::fwrite(stamped.data(), 1, stamped.size(), stderr);
}

}  // namespace

int RunPlannerMain(int argc, char** argv) {
  bool help = false;
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> parsed =
      ParseFlags(argc, argv, &help);
  if (!parsed.ok()) {
    std::fprintf(stderr, "dcp_planner: %s\n",
                 std::string(parsed.status().message()).c_str());
    return kPlannerMainUsageError;
  }
  if (help) {
    std::fputs(Usage().c_str(), stdout);
    std::fflush(stdout);
    return kPlannerMainOk;
  }
  const Flags flags(*std::move(parsed));
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
