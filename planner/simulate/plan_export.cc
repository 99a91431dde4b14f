#include "planner/simulate/plan_export.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "planner/plan/plan_json.h"

namespace dcp {
namespace {

std::string StepFile(const std::filesystem::path& directory, size_t step,
                     const char* extension) {
  return (directory / absl::StrCat("step_", step, extension)).string();
}

}  // namespace

absl::Status CreatePlanExportDirectory(const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return FileSystemError("creating the plan directory", directory,
                           error.value());
  }
  return absl::OkStatus();
}

absl::StatusOr<int> WriteSimulatedPlans(const std::string& directory,
                                        const SimulationReport& report,
                                        const CostModel& cost_model) {
  const size_t steps = report.batch_lengths.size();
  if (steps != static_cast<size_t>(report.steps)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the simulation kept the lengths of ", steps, " of ", report.steps,
        " steps; simulate with keep_plans to write its plans"));
  }
  const std::filesystem::path root(directory);
  const std::filesystem::path lengths_directory = root / "lengths";
  DCP_RETURN_IF_ERROR(CreatePlanExportDirectory(lengths_directory.string()));
  for (size_t step = 0; step < steps; ++step) {
    std::string text;
    for (int64_t length : report.batch_lengths[step]) {
      absl::StrAppend(&text, length, "\n");
    }
    DCP_RETURN_IF_ERROR(
        WriteFileAtomically(StepFile(lengths_directory, step, ".txt"), text));
  }
  int written = 0;
  for (const StrategyStats& stats : report.strategies) {
    // A strategy's plans are all of one layout or all of phases.
    const bool phased = stats.plans.empty();
    if ((phased ? stats.phased_plans.size() : stats.plans.size()) != steps) {
      return absl::FailedPreconditionError(
          absl::StrCat("the simulation kept ",
                       phased ? stats.phased_plans.size() : stats.plans.size(),
                       " of ", steps, " plans of ", stats.name,
                       "; simulate with keep_plans to write its plans"));
    }
    const std::filesystem::path strategy_directory = root / stats.name;
    DCP_RETURN_IF_ERROR(CreatePlanExportDirectory(strategy_directory.string()));
    for (size_t step = 0; step < steps; ++step) {
      const std::vector<int64_t>& lengths = report.batch_lengths[step];
      // A plan of one phase is written as the plan of one layout it is.
      std::string json;
      if (!phased) {
        json = PlanToJson(stats.plans[step], lengths, cost_model);
      } else if (stats.phased_plans[step].phases.size() == 1) {
        Plan one_layout = stats.phased_plans[step].phases.front();
        one_layout.lower_bound_seconds =
            stats.phased_plans[step].lower_bound_seconds;
        json = PlanToJson(one_layout, lengths, cost_model);
      } else {
        json = PhasedPlanToJson(stats.phased_plans[step], lengths, cost_model);
      }
      DCP_RETURN_IF_ERROR(
          WriteFileAtomically(StepFile(strategy_directory, step, ".json"),
                              absl::StrCat(json, "\n")));
      ++written;
    }
  }
  return written;
}

}  // namespace dcp
