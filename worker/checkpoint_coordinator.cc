#include "worker/checkpoint_coordinator.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/execution/checkpoint.h"
#include "worker/status_context.h"

namespace dcp {

CheckpointCoordinator::CheckpointCoordinator(
    CheckpointCoordinatorOptions options, WorldConsensus& consensus,
    torch::nn::Module& model, torch::optim::Optimizer& optimizer,
    const Clock& clock, std::function<void(const std::string&)> log)
    : options_(std::move(options)),
      consensus_(consensus),
      model_(model),
      optimizer_(optimizer),
      clock_(clock),
      log_(std::move(log)) {}

std::string CheckpointCoordinator::path() const {
  return CheckpointPath(options_.dir);
}

bool CheckpointCoordinator::Due(int64_t next_step, int64_t steps,
                                bool stopping) const {
  if (options_.dir.empty()) return false;
  const bool periodic = options_.every > 0 && next_step % options_.every == 0;
  return stopping || next_step == steps || periodic;
}

namespace {

/// What a failed checkpoint write's status code says about its cause, for
/// the ranks that only learn the code.
std::string DescribeWriteFailure(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kResourceExhausted:
      return "No space left on device (or over quota)";
    case absl::StatusCode::kPermissionDenied:
      return "Permission denied (or a read-only file system)";
    default:
      return absl::StrCat("an error (", absl::StatusCodeToString(code), ")");
  }
}

}  // namespace

absl::Status CheckpointCoordinator::Write(int64_t next_step,
                                         const MasterWeightState* master) {
  const absl::Time start = clock_.Now();
  if (absl::Status status = WriteCheckpoint(
          options_.dir, next_step, options_.model_name, model_, optimizer_,
          options_.write_file, options_.settings, master);
      !status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("checkpoint write failed on rank 0: ", status.message()));
  }
  log_(absl::StrFormat("checkpoint (next step %d) written to %s in %.3f s",
                       next_step, path(),
                       absl::ToDoubleSeconds(clock_.Now() - start)));
  return absl::OkStatus();
}

absl::Status CheckpointCoordinator::WriteOnEveryRank(int64_t next_step) {
  MasterWeightState master;
  if (options_.settings.has_master_weights()) {
    if (!options_.gather_master) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoints with ", options_.settings.ToString(),
          " need the executor's master weights (gather_master)"));
    }
    // Every rank, before rank 0 writes: the gather is a collective.
    absl::StatusOr<MasterWeightState> gathered =
        options_.gather_master(/*keep=*/consensus_.rank() == 0);
    if (!gathered.ok()) {
      return WithContext(gathered.status(),
                         absl::StrCat("gathering the master weights for the "
                                      "checkpoint before step ",
                                      next_step));
    }
    master = *std::move(gathered);
  }
  const absl::Status written =
      consensus_.rank() == 0 ? Write(next_step, &master) : absl::OkStatus();
  // Only rank 0 adds anything: the sum is its status code (0: written).
  absl::StatusOr<double> code =
      consensus_.Sum(static_cast<double>(static_cast<int>(written.code())),
                     "whether the checkpoint was written", options_.timeout);
  if (!written.ok()) return written;
  if (!code.ok()) return code.status();
  if (*code != 0) {
    const int number = static_cast<int>(*code);
    const absl::StatusCode failure =
        number > 0 && number <= static_cast<int>(
                                    absl::StatusCode::kUnauthenticated)
            ? static_cast<absl::StatusCode>(number)
            : absl::StatusCode::kUnknown;
    return absl::AbortedError(absl::StrCat(
        "checkpoint write failed on rank 0: ", DescribeWriteFailure(failure),
        " in ", options_.dir, " (before step ", next_step,
        "; rank 0's log has the OS error; the previous checkpoint there is "
        "unchanged)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int64_t>> CheckpointCoordinator::Resume() {
  MasterWeightState master;
  absl::StatusOr<std::optional<int64_t>> next_step =
      ReadCheckpoint(options_.dir, options_.model_name, model_, optimizer_,
                     options_.settings, &master);
  if (next_step.ok() && next_step->has_value() &&
      options_.settings.has_master_weights()) {
    const absl::Status loaded =
        options_.load_master
            ? options_.load_master(master)
            : absl::FailedPreconditionError(
                  "resuming master weights needs load_master");
    if (!loaded.ok()) next_step = loaded;
  }
  if (!next_step.ok()) {
    return WithContext(next_step.status(), "resuming");
  }
  const double mine =
      next_step->has_value() ? static_cast<double>(**next_step) : -1;
  absl::StatusOr<std::vector<double>> all =
      consensus_.Gather(mine, "on the checkpoint step", options_.timeout);
  if (!all.ok()) return all.status();
  for (int r = 0; r < static_cast<int>(all->size()); ++r) {
    if ((*all)[r] != mine) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ranks disagree on the checkpoint to resume from: rank ",
          consensus_.rank(), " found ",
          next_step->has_value() ? "next step " : "none",
          next_step->has_value() ? absl::StrCat(**next_step) : "", " in ",
          options_.dir, ", rank ", r, " found ",
          (*all)[r] < 0 ? std::string("none")
                        : absl::StrCat("next step ", (*all)[r]),
          "; --checkpoint-dir must be one directory shared by every rank"));
    }
  }
  return *next_step;
}

}  // namespace dcp
