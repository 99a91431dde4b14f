#include "planner/service/step_state_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

constexpr int kStepDigits = 20;
/// planner_state_store.cc's job records (this format's and the JSON one's).
constexpr char kJobFile[] = "job.pb";
constexpr char kLegacyJobFile[] = "job.json";

bool Exists(const std::string& path) {
  std::error_code error;
  return std::filesystem::exists(path, error);
}

/// OK when `directory` is a planner's state directory of this format.
absl::Status CheckStateDirectory(const std::string& directory) {
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    return absl::NotFoundError(absl::StrCat(
        "there is no state directory '", directory,
        "'; give the directory dcp_planner --state-dir wrote"));
  }
  if (Exists(absl::StrCat(directory, "/", kLegacyJobFile))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state directory '", directory,
        "' was written by an earlier planner release (JSON state files such "
        "as job.json), which recorded no plans or step reports"));
  }
  if (!Exists(absl::StrCat(directory, "/", kJobFile))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", directory,
        "' is not a planner state directory (it has no job.pb); give the "
        "directory dcp_planner --state-dir wrote"));
  }
  return absl::OkStatus();
}

/// The bytes of `directory`/`name`, or nullopt when there is no such file.
absl::StatusOr<std::optional<std::string>> ReadFile(
    const std::string& directory, const std::string& name) {
  const std::string path = absl::StrCat(directory, "/", name);
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    if (!Exists(path)) return std::optional<std::string>();
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read '", path, "'"));
  }
  std::string bytes((std::istreambuf_iterator<char>(file)),
                    std::istreambuf_iterator<char>());
  if (file.bad()) {
    return absl::InternalError(absl::StrCat("cannot read '", path, "'"));
  }
  return std::optional<std::string>(std::move(bytes));
}

/// Parses `directory`/`name` into `record`; false when there is no file.
template <typename Record>
absl::StatusOr<bool> ReadRecord(const std::string& directory,
                                const std::string& name, absl::string_view what,
                                Record& record) {
  absl::StatusOr<std::optional<std::string>> bytes = ReadFile(directory, name);
  if (!bytes.ok()) return bytes.status();
  if (!bytes->has_value()) return false;
  if (!record.ParseFromString(**bytes)) {
    return absl::DataLossError(absl::StrCat(
        "state file '", directory, "/", name, "' is not a ", what,
        " record; restore the state directory"));
  }
  return true;
}

}  // namespace

std::string StepFileName(absl::string_view prefix, int64_t step) {
  return absl::StrFormat("%s%0*d.pb", prefix, kStepDigits, step);
}

std::optional<int64_t> StepOfFileName(absl::string_view name,
                                      absl::string_view prefix) {
  if (!absl::ConsumePrefix(&name, prefix) || !absl::ConsumeSuffix(&name, ".pb") ||
      name.size() != kStepDigits ||
      !std::all_of(name.begin(), name.end(), absl::ascii_isdigit)) {
    return std::nullopt;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(name, &step)) return std::nullopt;
  return step;
}

absl::StatusOr<std::vector<int64_t>> RecordedSteps(const std::string& directory,
                                                   absl::string_view prefix) {
  DCP_RETURN_IF_ERROR(CheckStateDirectory(directory));
  std::vector<int64_t> steps;
  std::error_code error;
  for (std::filesystem::directory_iterator it(directory, error), end;
       !error && it != end; it.increment(error)) {
    if (std::optional<int64_t> step =
            StepOfFileName(it->path().filename().string(), prefix)) {
      steps.push_back(*step);
    }
  }
  if (error) {
    return absl::InternalError(absl::StrCat("cannot list '", directory,
                                            "': ", error.message()));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string DescribeSteps(const std::vector<int64_t>& steps) {
  if (steps.empty()) return "none";
  std::vector<std::string> ranges;
  for (size_t i = 0; i < steps.size();) {
    size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    ranges.push_back(j == i ? absl::StrCat(steps[i])
                            : absl::StrCat(steps[i], "..", steps[j]));
    i = j + 1;
  }
  return absl::StrJoin(ranges, ", ");
}

absl::StatusOr<RecordedStep> ReadRecordedStep(const std::string& directory,
                                              int64_t step) {
  DCP_RETURN_IF_ERROR(CheckStateDirectory(directory));
  RecordedStep recorded;
  absl::StatusOr<bool> found =
      ReadRecord(directory, StepFileName(kStepPlanPrefix, step), "step plan",
                 recorded.plan);
  if (!found.ok()) return found.status();
  if (!*found) {
    absl::StatusOr<std::vector<int64_t>> planned =
        RecordedSteps(directory, kStepPlanPrefix);
    if (!planned.ok()) return planned.status();
    if (planned->empty()) {
      absl::StatusOr<std::vector<int64_t>> window =
          RecordedSteps(directory, kStepRecordPrefix);
      if (!window.ok()) return window.status();
      return absl::FailedPreconditionError(absl::StrCat(
          "state directory '", directory, "' holds no step plans",
          window->empty()
              ? " (no step was planned)"
              : absl::StrCat(" (steps ", DescribeSteps(*window),
                             " have step records only: the planner that "
                             "wrote them predates plan records)"),
          "; a planner of this release records each planned step of its "
          "plan-cache window"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step, " has no plan record in state directory '", directory,
        "' (it is outside the planner's plan-cache window or was never "
        "planned); steps present: ",
        DescribeSteps(*planned)));
  }
  if (recorded.plan.step() != step) {
    return absl::DataLossError(absl::StrCat(
        "state file '", directory, "/", StepFileName(kStepPlanPrefix, step),
        "' records step ", recorded.plan.step(),
        "; restore the state directory"));
  }
  v1::StepReportsRecord reports;
  found = ReadRecord(directory, StepFileName(kStepReportsPrefix, step),
                     "step reports", reports);
  if (!found.ok()) return found.status();
  if (*found) recorded.reports = std::move(reports);
  return recorded;
}

}  // namespace dcp
