#include "planner/service/step_reports_writer.h"

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/test_files.h"
#include "gtest/gtest.h"
#include "planner/service/planner_state_store.h"
#include "planner/service/step_state_files.h"

namespace dcp {
namespace {

v1::StepReportsRecord Reports(int64_t step, int ranks) {
  v1::StepReportsRecord record;
  record.set_step(step);
  for (int r = 0; r < ranks; ++r) record.add_ranks()->set_rank(r);
  return record;
}

// A state store for the tiny model in `directory` that holds the record of
// each of steps [0, steps) and, with `with_plans`, an empty plan record of
// each.
absl::StatusOr<std::unique_ptr<PlannerStateStore>> OpenStoreWithSteps(
    const std::string& directory, int64_t steps, bool with_plans,
    PlannerState& state) {
  v1::JobRecord job;
  job.mutable_model()->set_name("tiny");
  absl::StatusOr<std::unique_ptr<PlannerStateStore>> store =
      PlannerStateStore::Open(directory, job, &state);
  if (!store.ok()) return store.status();
  for (int64_t step = 0; step < steps; ++step) {
    v1::StepRecord record;
    record.set_step(step);
    if (absl::Status written = (*store)->WriteStep(record); !written.ok()) {
      return written;
    }
    if (!with_plans) continue;
    v1::StepPlanRecord plan;
    plan.set_step(step);
    if (absl::Status written = (*store)->WriteStepPlan(plan); !written.ok()) {
      return written;
    }
  }
  return store;
}

TEST(StepReportsWriterTest, WritesTheLatestRecordOfEachStep) {
  const std::string directory = FreshTestDirectory("step_reports_writer_");
  PlannerState state;
  absl::StatusOr<std::unique_ptr<PlannerStateStore>> store =
      OpenStoreWithSteps(directory, /*steps=*/3, /*with_plans=*/true, state);
  ASSERT_TRUE(store.ok()) << store.status();
  {
    StepReportsWriter writer(**store, nullptr);
    writer.Write(Reports(0, 1));
    writer.Write(Reports(1, 1));
    writer.Write(Reports(1, 2));  // replaces or follows the first
    writer.Flush();
    for (int64_t step : {0, 1}) {
      absl::StatusOr<RecordedStep> read = ReadRecordedStep(directory, step);
      ASSERT_TRUE(read.ok()) << read.status();
      ASSERT_TRUE(read->reports.has_value()) << step;
      EXPECT_EQ(read->reports->ranks_size(), step == 0 ? 1 : 2);
    }
    writer.Write(Reports(2, 3));
  }  // the destructor writes what waits
  absl::StatusOr<RecordedStep> last = ReadRecordedStep(directory, 2);
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE(last->reports.has_value());
  EXPECT_EQ(last->reports->ranks_size(), 3);
}

// Plan records queued with WritePlan are written by the writer's thread:
// there after Flush, and what waits at destruction is written too.
TEST(StepReportsWriterTest, WritesQueuedPlanRecords) {
  const std::string directory = FreshTestDirectory("step_plans_writer_");
  PlannerState state;
  absl::StatusOr<std::unique_ptr<PlannerStateStore>> store =
      OpenStoreWithSteps(directory, /*steps=*/2, /*with_plans=*/false, state);
  ASSERT_TRUE(store.ok()) << store.status();
  auto plan = [](int64_t step, int groups) {
    v1::StepPlanRecord record;
    record.set_step(step);
    for (int g = 0; g < groups; ++g) record.mutable_plan()->add_groups();
    return record;
  };
  {
    StepReportsWriter writer(**store, nullptr);
    writer.WritePlan(plan(0, 2));
    writer.Write(Reports(0, 1));
    writer.Flush();
    absl::StatusOr<RecordedStep> read = ReadRecordedStep(directory, 0);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->plan.plan().groups_size(), 2);
    ASSERT_TRUE(read->reports.has_value());
    writer.WritePlan(plan(1, 3));
  }  // the destructor writes what waits
  absl::StatusOr<RecordedStep> last = ReadRecordedStep(directory, 1);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->plan.plan().groups_size(), 3);
}

}  // namespace
}  // namespace dcp
