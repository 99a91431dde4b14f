// Unit tests of WriteSimulatedPlans: one file per strategy and step that
// reads back as the plan simulated, the steps' lengths beside them, and
// the errors.
#include "planner/simulate/plan_export.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/fake_clock.h"
#include "common/test_files.h"
#include "cost_model/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"
#include "planner/plan/plan_json.h"
#include "planner/plan/test_cost_model.h"
#include "planner/simulate/simulator.h"
#include "planner/workload/workload.h"
#include "planner/workload/workload_testing.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return TestTempPath("plan_export_test_" + name);
}

// The file at `path`, which must not be empty.
std::string ReadFile(const std::string& path) {
  std::string text = ReadTestFile(path);
  EXPECT_FALSE(text.empty()) << path;
  return text;
}

// Three steps of a one-layout and a phased strategy on one node.
SimulationReport SimulateSmall(const CostModel& cost_model, bool keep_plans) {
  BatchStream stream = MakeSpecStream(
      "longtail:max=32768", /*global_batch_tokens=*/8 * 16384, /*seed=*/3);
  SimulationOptions options;
  options.steps = 3;
  options.strategies = {"packed", "videosys-dcp"};
  options.keep_plans = keep_plans;
  FakeClock clock;
  absl::StatusOr<SimulationReport> report =
      Simulate(cost_model, stream, options, clock);
  EXPECT_TRUE(report.ok()) << report.status();
  return *std::move(report);
}

TEST(WriteSimulatedPlansTest, EveryStrategyAndStepReadsBack) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const SimulationReport report =
      SimulateSmall(cost_model, /*keep_plans=*/true);
  const std::string directory = TempPath("every");
  absl::StatusOr<int> written =
      WriteSimulatedPlans(directory, report, cost_model);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, 2 * 3);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    std::vector<int64_t> lengths;
    for (absl::string_view line : absl::StrSplit(
             ReadFile(absl::StrCat(directory, "/lengths/step_", step, ".txt")),
             '\n', absl::SkipEmpty())) {
      lengths.push_back(std::stoll(std::string(line)));
    }
    EXPECT_EQ(lengths, report.batch_lengths[step]);

    const std::string packed =
        ReadFile(absl::StrCat(directory, "/packed/step_", step, ".json"));
    EXPECT_FALSE(PlanJsonHasPhases(packed));
    absl::StatusOr<Plan> plan = PlanFromJson(packed);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->predicted_step_seconds,
              report.strategies[0].plans[step].predicted_step_seconds);
    EXPECT_EQ(plan->lower_bound_seconds, report.lower_bound_step_seconds[step]);

    const std::string videosys =
        ReadFile(absl::StrCat(directory, "/videosys-dcp/step_", step, ".json"));
    EXPECT_TRUE(PlanJsonHasPhases(videosys));
    absl::StatusOr<PhasedPlan> phased = PhasedPlanFromJson(videosys);
    ASSERT_TRUE(phased.ok()) << phased.status();
    EXPECT_EQ(phased->phases.size(),
              report.strategies[1].phased_plans[step].phases.size());
  }
}

TEST(WriteSimulatedPlansTest, ARunThatKeptNoPlansIsAFailedPrecondition) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  absl::StatusOr<int> written = WriteSimulatedPlans(
      TempPath("none"), SimulateSmall(cost_model, /*keep_plans=*/false),
      cost_model);
  EXPECT_EQ(written.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(written.status().message(), HasSubstr("keep_plans"));
}

TEST(WriteSimulatedPlansTest, ADirectoryThatCannotBeMadeIsNamed) {
  const std::string blocker = TempPath("blocker");
  WriteTestFile(blocker, "x");
  absl::Status status = CreatePlanExportDirectory(blocker + "/sub");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(blocker + "/sub"));
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  absl::StatusOr<int> written = WriteSimulatedPlans(
      blocker + "/sub", SimulateSmall(cost_model, /*keep_plans=*/true),
      cost_model);
  EXPECT_FALSE(written.ok());
  EXPECT_THAT(written.status().message(), HasSubstr("blocker/sub"));
}

}  // namespace
}  // namespace dcp
