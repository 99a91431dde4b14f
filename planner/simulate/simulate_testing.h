#ifndef DCP_PLANNER_SIMULATE_TESTING_H_
#define DCP_PLANNER_SIMULATE_TESTING_H_

// Simulations for the planner's tests. testonly.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "cost_model/cost_model.h"
#include "gtest/gtest.h"
#include "planner/simulate/simulator.h"
#include "planner/workload/workload_testing.h"

namespace dcp {

/// Every strategy over `steps` batches of 1M tokens of `spec` drawn from
/// `seed`, timed on the real clock, each step's plans kept if `keep_plans`;
/// a test failure (and a crash on use) if the simulation fails.
inline SimulationReport SimulateSpec(const CostModel& cost_model,
                                     const std::string& spec, uint64_t seed,
                                     int steps, bool keep_plans) {
  BatchStream stream =
      MakeSpecStream(spec, /*global_batch_tokens=*/1 << 20, seed);
  SimulationOptions options;
  options.steps = steps;
  options.keep_plans = keep_plans;
  absl::StatusOr<SimulationReport> report =
      Simulate(cost_model, stream, options, RealClock::Get());
  EXPECT_TRUE(report.ok()) << report.status();
  return *report;
}

}  // namespace dcp

#endif  // DCP_PLANNER_SIMULATE_TESTING_H_
