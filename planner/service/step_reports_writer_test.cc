#include "planner/service/step_reports_writer.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "planner/service/step_state_files.h"
#include "planner/service/test_directory.h"

namespace dcp {
namespace {

v1::StepReportsRecord Reports(int64_t step, int ranks) {
  v1::StepReportsRecord record;
  record.set_step(step);
  for (int r = 0; r < ranks; ++r) record.add_ranks()->set_rank(r);
  return record;
}

TEST(StepReportsWriterTest, WritesTheLatestRecordOfEachStep) {
  const std::string directory = FreshTestDirectory("step_reports_writer_");
  PlannerState state;
  v1::JobRecord job;
  job.mutable_model()->set_name("tiny");
  auto store = PlannerStateStore::Open(directory, job, &state);
  ASSERT_TRUE(store.ok()) << store.status();
  for (int64_t step = 0; step < 3; ++step) {
    v1::StepRecord record;
    record.set_step(step);
    ASSERT_TRUE((*store)->WriteStep(record).ok());
    v1::StepPlanRecord plan;
    plan.set_step(step);
    ASSERT_TRUE((*store)->WriteStepPlan(plan).ok());
  }
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
  v1::JobRecord job;
  job.mutable_model()->set_name("tiny");
  auto store = PlannerStateStore::Open(directory, job, &state);
  ASSERT_TRUE(store.ok()) << store.status();
  for (int64_t step = 0; step < 2; ++step) {
    v1::StepRecord record;
    record.set_step(step);
    ASSERT_TRUE((*store)->WriteStep(record).ok());
  }
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
