#ifndef DCP_LAUNCHER_PLANNER_CHILD_H_
#define DCP_LAUNCHER_PLANNER_CHILD_H_

// The local job's dcp_planner child process: started on loopback from the
// job's flags and stopped, and the planner drill that stops and restarts it
// while the workers train (scripts/fault_drill.sh drives the drill).

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launcher/child_process.h"
#include "launcher/local_job_config.h"

namespace dcp {

/// The planner process, started and serving.
struct PlannerChild {
  std::unique_ptr<ChildProcess> process;
  int port = 0;
  std::string log_path;
  std::string cluster_path;
};

/// Where the planner keeps its state: --planner-state-dir, else a folder
/// of the work directory when the drill restarts it; empty (in memory)
/// otherwise.
std::string PlannerStateDir(const LocalJobConfig& config);

/// Starts the planner of `config` with the cluster file `cluster_path` on
/// 127.0.0.1:`port` (0 picks one) and waits until it serves: INTERNAL with
/// the tail of its log when it exits first, DEADLINE_EXCEEDED past
/// `deadline` or once `interrupted` says so.
absl::StatusOr<PlannerChild> StartPlanner(
    const LocalJobConfig& config, const std::string& cluster_path,
    absl::Time deadline, const std::function<bool()>& interrupted,
    int port = 0);

/// Stops the planner: SIGTERM, then SIGKILL after a grace period.
void StopPlanner(PlannerChild& planner);

/// The planner drill of one run of the workers: once rank 0 reports the
/// chosen step, the planner is stopped (SIGKILL or SIGTERM), kept down for
/// --planner-down-for after it exited, then restarted on the same port and
/// state directory while the workers wait for it. What it does is printed
/// with `print`. Not thread-safe: the launcher's monitoring loop drives it.
class PlannerDrill {
 public:
  PlannerDrill(const LocalJobConfig& config, PlannerChild& planner,
               absl::Time deadline, std::function<bool()> interrupted,
               std::function<void(const std::string&)> print)
      : config_(config),
        planner_(planner),
        deadline_(deadline),
        interrupted_(std::move(interrupted)),
        print_(std::move(print)) {}

  /// Whether the planner is meant to be running (its exit is a failure).
  bool planner_expected_up() const {
    return state_ == State::kWaiting || state_ == State::kRestarted;
  }

  /// One turn of the monitoring loop; `due` once rank 0 reported the step.
  absl::Status Poll(bool due);

 private:
  enum class State { kWaiting, kStopping, kDown, kRestarted };

  std::string SignalName() const;

  const LocalJobConfig& config_;
  PlannerChild& planner_;
  const absl::Time deadline_;
  const std::function<bool()> interrupted_;
  const std::function<void(const std::string&)> print_;
  State state_ = State::kWaiting;
  absl::Time stopped_at_;
  absl::Time exited_at_;
};

}  // namespace dcp

#endif  // DCP_LAUNCHER_PLANNER_CHILD_H_
