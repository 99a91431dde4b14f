#include "launcher/planner_port.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "planner/service/port_file.h"

namespace dcp {

absl::StatusOr<int> WaitForPlannerPort(ChildProcess& process,
                                       const std::string& port_file,
                                       absl::Time deadline,
                                       const std::function<bool()>& stop) {
  while (true) {
    absl::StatusOr<std::optional<PlannerPorts>> ports = ReadPortFile(port_file);
    if (!ports.ok()) return ports.status();
    if (ports->has_value()) return (*ports)->grpc_port;
    if (std::optional<int> code = process.Poll(); code.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "dcp_planner exited with code ", *code, " before serving"));
    }
    if (absl::Now() >= deadline || (stop && stop())) {
      return absl::DeadlineExceededError(absl::StrCat(
          "dcp_planner did not write its ports to ", port_file, " in time"));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

}  // namespace dcp
