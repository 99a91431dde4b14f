#ifndef DCP_PLANNER_SERVICE_PORT_FILE_H_
#define DCP_PLANNER_SERVICE_PORT_FILE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace dcp {

/// The ports a started dcp_planner serves on (`--port-file`), so that a
/// launcher that asked for port 0 learns them without parsing its log.
struct PlannerPorts {
  int grpc_port = 0;
  /// 0 when metrics are disabled.
  int metrics_port = 0;
};

/// Writes `ports` to `path` atomically (common/atomic_file), as two lines:
/// `grpc_port=N` and `metrics_port=M`.
absl::Status WritePortFile(const std::string& path, const PlannerPorts& ports);

/// Reads what WritePortFile wrote: nullopt while the file does not exist
/// yet; INVALID_ARGUMENT naming the file for anything else than those two
/// lines with ports in range (0..65535, the gRPC port >= 1).
absl::StatusOr<std::optional<PlannerPorts>> ReadPortFile(
    const std::string& path);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PORT_FILE_H_
