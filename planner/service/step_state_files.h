// The planner's per-step records in its state directory
// (proto/dcp/v1/step_state.proto): their file names, shared by the writer
// (PlannerStateStore) and the readers, and a read-only reader for tools
// (`dcp timeline --state-dir`). Needs protobuf, not gRPC.

#ifndef DCP_PLANNER_SERVICE_STEP_STATE_FILES_H_
#define DCP_PLANNER_SERVICE_STEP_STATE_FILES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dcp/v1/step_state.pb.h"

namespace dcp {

inline constexpr char kStepPlanPrefix[] = "plan_";
inline constexpr char kStepReportsPrefix[] = "reports_";
/// The prefix of planner_state.proto's StepRecord files ("step_<step>.pb").
inline constexpr char kStepRecordPrefix[] = "step_";

/// "<prefix><step, 20 digits>.pb": the file of `step`'s record of that kind.
std::string StepFileName(absl::string_view prefix, int64_t step);
/// The step of a StepFileName with `prefix`, or nullopt for any other name
/// (a temporary file, another kind of record).
std::optional<int64_t> StepOfFileName(absl::string_view name,
                                      absl::string_view prefix);

/// One step as the state directory recorded it.
struct RecordedStep {
  v1::StepPlanRecord plan;
  /// Unset when no rank's report was recorded.
  std::optional<v1::StepReportsRecord> reports;
};

/// Reads `step`'s records from the planner state directory `directory`
/// without its lock (a running planner may hold it) and without changing
/// it. NOT_FOUND when the directory does not exist; FAILED_PRECONDITION,
/// saying what would fix it, when it is not a planner's state directory
/// (no job.pb), was written by the earlier JSON format or by a planner that
/// recorded no plans, when `step` has no plan record ("steps present:
/// a..b"). DATA_LOSS for a record that does not parse.
absl::StatusOr<RecordedStep> ReadRecordedStep(const std::string& directory,
                                              int64_t step);

/// The steps of `directory` with a record of `prefix`, ascending (errors as
/// ReadRecordedStep's for the directory).
absl::StatusOr<std::vector<int64_t>> RecordedSteps(
    const std::string& directory, absl::string_view prefix);

/// Ascending steps as ranges: "3..10, 12, 14..20" ("none" when empty).
std::string DescribeSteps(const std::vector<int64_t>& steps);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_STEP_STATE_FILES_H_
