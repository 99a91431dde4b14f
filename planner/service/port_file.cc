#include "planner/service/port_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/atomic_file.h"

namespace dcp {
namespace {

constexpr char kGrpcKey[] = "grpc_port=";
constexpr char kMetricsKey[] = "metrics_port=";

absl::Status Malformed(const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("port file '", path, "' ", why,
                   "; it should hold the two lines ", kGrpcKey, "N and ",
                   kMetricsKey, "M that dcp_planner --port-file writes"));
}

}  // namespace

absl::Status WritePortFile(const std::string& path, const PlannerPorts& ports) {
  return WriteFileAtomically(
      path, absl::StrCat(kGrpcKey, ports.grpc_port, "\n", kMetricsKey,
                         ports.metrics_port, "\n"));
}

absl::StatusOr<std::optional<PlannerPorts>> ReadPortFile(
    const std::string& path) {
  std::ifstream file(path);
  if (!file.is_open()) {
    if (errno == ENOENT) return std::optional<PlannerPorts>();
    return FileSystemError("opening", path, errno);
  }
  std::stringstream text;
  text << file.rdbuf();
  const std::vector<std::string> lines =
      absl::StrSplit(text.str(), '\n', absl::SkipEmpty());
  if (lines.size() != 2) {
    return Malformed(path, absl::StrCat("has ", lines.size(), " lines"));
  }
  PlannerPorts ports;
  absl::string_view grpc = lines[0];
  absl::string_view metrics = lines[1];
  if (!absl::ConsumePrefix(&grpc, kGrpcKey) ||
      !absl::SimpleAtoi(grpc, &ports.grpc_port) || ports.grpc_port < 1 ||
      ports.grpc_port > 65535) {
    return Malformed(path, absl::StrCat("has first line '", lines[0], "'"));
  }
  if (!absl::ConsumePrefix(&metrics, kMetricsKey) ||
      !absl::SimpleAtoi(metrics, &ports.metrics_port) ||
      ports.metrics_port < 0 || ports.metrics_port > 65535) {
    return Malformed(path, absl::StrCat("has second line '", lines[1], "'"));
  }
  return std::optional<PlannerPorts>(ports);
}

}  // namespace dcp
