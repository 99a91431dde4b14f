#ifndef DCP_PLANNER_SIMULATE_PLAN_EXPORT_H_
#define DCP_PLANNER_SIMULATE_PLAN_EXPORT_H_

// The plans of a simulation as files that `dcp validate` and `dcp price`
// read (`dcp simulate --write-plans=DIR`).

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cost_model/cost_model.h"
#include "planner/simulate/simulator.h"

namespace dcp {

/// Creates `directory` (and its parents) unless it exists, so that a
/// directory that cannot be made is reported before a long simulation.
/// Errors as FileSystemError, naming the directory.
absl::Status CreatePlanExportDirectory(const std::string& directory);

/// Writes the plan of every step of every strategy of `report` (simulated
/// with SimulationOptions::keep_plans) to `directory`/STRATEGY/step_K.json,
/// K from 0 (the batch `dcp plan --step=K` plans of the same stream), in the
/// JSON of `dcp plan --format=json`: PlanToJson for plans of one layout,
/// PhasedPlanToJson for those of phases, predictions and lower bound
/// included. Each step's lengths go to `directory`/lengths/step_K.txt, one
/// per line, for `--lengths`. Files are replaced atomically; directories are
/// created. Returns the number of plan files written. FAILED_PRECONDITION
/// when the report kept no plans or lengths of some step; file errors as
/// FileSystemError, naming the path.
absl::StatusOr<int> WriteSimulatedPlans(const std::string& directory,
                                        const SimulationReport& report,
                                        const CostModel& cost_model);

}  // namespace dcp

#endif  // DCP_PLANNER_SIMULATE_PLAN_EXPORT_H_
