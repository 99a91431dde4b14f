#ifndef DCP_LAUNCHER_PLANNER_PORT_H_
#define DCP_LAUNCHER_PLANNER_PORT_H_

// Waiting for a dcp_planner child to serve: the launcher's and the memory
// benchmark's one way to learn the port of a planner started on port 0.

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launcher/child_process.h"

namespace dcp {

/// Waits until the dcp_planner `process`, started with
/// --port-file=`port_file`, has written it; its gRPC port.
/// FAILED_PRECONDITION "dcp_planner exited with code N before serving" when
/// it exits first (its log says why); DEADLINE_EXCEEDED when `deadline`
/// passes or `stop` (may be empty) says stop; INVALID_ARGUMENT for a port
/// file that does not read (ReadPortFile).
absl::StatusOr<int> WaitForPlannerPort(ChildProcess& process,
                                       const std::string& port_file,
                                       absl::Time deadline,
                                       const std::function<bool()>& stop);

}  // namespace dcp

#endif  // DCP_LAUNCHER_PLANNER_PORT_H_
