#include "launcher/planner_child.h"

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "cost_model/model_spec.h"
#include "launcher/planner_port.h"

namespace dcp {
namespace {

/// The planner's --model: a preset is written out with the element size
/// the workers train in (float32 on the CPU), so that the cost model counts
/// the bytes the all-to-alls and activations really move; a file is given
/// as it is.
absl::StatusOr<std::string> PlannerModelArgument(const LocalJobConfig& config) {
  absl::StatusOr<ModelSpec> preset = ModelPreset(config.model);
  if (!preset.ok()) return config.model;
  preset->dtype_bytes = 4;
  const std::string path = absl::StrCat(config.work_dir, "/model.json");
  std::ofstream file(path);
  file << ModelSpecToJson(*preset) << "\n";
  file.close();
  if (!file) return absl::InternalError(absl::StrCat("cannot write ", path));
  return path;
}

}  // namespace

std::string PlannerStateDir(const LocalJobConfig& config) {
  if (!config.planner_state_dir.empty()) return config.planner_state_dir;
  if (config.restart_planner_after_step < 0) return "";
  return absl::StrCat(config.work_dir, "/planner_state");
}

absl::StatusOr<PlannerChild> StartPlanner(
    const LocalJobConfig& config, const std::string& cluster_path,
    absl::Time deadline, const std::function<bool()>& interrupted, int port) {
  PlannerChild planner;
  planner.log_path = absl::StrCat(config.work_dir, "/planner.log");
  planner.cluster_path = cluster_path;
  // The planner writes its ports to this file once serving (--port-file);
  // its stdout is for people.
  const std::string port_file = absl::StrCat(config.work_dir, "/planner.ports");
  std::remove(port_file.c_str());
  DCP_ASSIGN_OR_RETURN(const std::string model_argument,
                       PlannerModelArgument(config));
  std::vector<std::string> argv = {
      config.planner_binary,
      absl::StrCat("--listen=127.0.0.1:", port),
      "--metrics-listen=",
      absl::StrCat("--model=", model_argument),
      absl::StrCat("--cluster=", cluster_path),
      "--drain-timeout=2s",
      absl::StrCat("--job-id=", config.job_id),
      absl::StrCat("--online-refit=", config.online_refit ? "true" : "false"),
      absl::StrCat("--port-file=", port_file)};
  if (const std::string state_dir = PlannerStateDir(config);
      !state_dir.empty()) {
    argv.push_back(absl::StrCat("--state-dir=", state_dir));
  }
  argv.push_back(
      absl::StrCat("--phased-plans=", config.phased_plans ? "true" : "false"));
  argv.push_back(absl::StrCat("--phased-min-gap=", config.phased_min_gap));
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Start(argv, planner.log_path, [](const std::string&) {});
  if (!process.ok()) return process.status();
  planner.process = *std::move(process);
  absl::StatusOr<int> served =
      WaitForPlannerPort(*planner.process, port_file, deadline, interrupted);
  if (served.status().code() == absl::StatusCode::kFailedPrecondition) {
    return absl::InternalError(
        absl::StrCat(served.status().message(), "; its log (", planner.log_path,
                     "):\n", LogTail(planner.log_path, 20)));
  }
  if (!served.ok()) return served.status();
  planner.port = *served;
  return planner;
}

void StopPlanner(PlannerChild& planner) {
  if (planner.process == nullptr) return;
  planner.process->Stop(/*grace=*/absl::Seconds(10));
}

absl::Status PlannerDrill::Poll(bool due) {
  const absl::Time now = absl::Now();
  switch (state_) {
    case State::kWaiting:
      if (!due) return absl::OkStatus();
      print_(absl::StrCat("[dcp_local_job] planner drill: sending ",
                          SignalName(), " to dcp_planner (pid ",
                          planner_.process->pid(), ") after step ",
                          config_.restart_planner_after_step, "; it restarts ",
                          absl::FormatDuration(config_.planner_down_for),
                          " after it exited, on 127.0.0.1:", planner_.port,
                          " with the same --state-dir"));
      planner_.process->Signal(config_.planner_stop_signal);
      stopped_at_ = now;
      state_ = State::kStopping;
      return absl::OkStatus();
    case State::kStopping: {
      const std::optional<int> code = planner_.process->Poll();
      if (!code.has_value()) {
        if (now - stopped_at_ > absl::Seconds(60)) {
          return absl::DeadlineExceededError(absl::StrCat(
              "dcp_planner did not exit within 60 s of ", SignalName()));
        }
        return absl::OkStatus();
      }
      planner_.process->JoinOutput();
      exited_at_ = now;
      print_(absl::StrFormat(
          "[dcp_local_job] planner drill: dcp_planner exited with code %d "
          "%.2f s after %s; the workers wait for it",
          *code, absl::ToDoubleSeconds(now - stopped_at_), SignalName()));
      state_ = State::kDown;
      return absl::OkStatus();
    }
    case State::kDown: {
      if (now < exited_at_ + config_.planner_down_for) {
        return absl::OkStatus();
      }
      DCP_ASSIGN_OR_RETURN(
          PlannerChild restarted,
          StartPlanner(config_, planner_.cluster_path, deadline_, interrupted_,
                       planner_.port));
      planner_ = std::move(restarted);
      print_(absl::StrFormat(
          "[dcp_local_job] planner drill: dcp_planner restarted (pid %d) on "
          "127.0.0.1:%d after %.1f s down",
          planner_.process->pid(), planner_.port,
          absl::ToDoubleSeconds(absl::Now() - exited_at_)));
      state_ = State::kRestarted;
      return absl::OkStatus();
    }
    case State::kRestarted:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

std::string PlannerDrill::SignalName() const {
  return config_.planner_stop_signal == SIGKILL ? "SIGKILL" : "SIGTERM";
}

}  // namespace dcp
