#include "worker/run_summary.h"

#include <string>

#include "absl/status/status.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/plan.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TestPath(const std::string& name) {
  return TestTempPath("run_summary_" + name);
}

Plan ThreeGroupPlan() {
  Plan plan;
  GroupPlan two;
  two.ranks = {0, 1};
  two.micro_batches.resize(1);
  GroupPlan one;
  one.ranks = {2};
  one.micro_batches.resize(3);
  one.micro_batches[1].checkpointed_layers = 1;
  GroupPlan last;
  last.ranks = {3};
  last.micro_batches.resize(2);
  plan.groups = {two, one, last};
  plan.predicted_step_seconds = 0.25;
  return plan;
}

TEST(PlanShapeTest, ListsGroupsMicroBatchesAndRecomputeRanges) {
  EXPECT_EQ(PlanShape(ThreeGroupPlan()),
            "SP[2,1,1] mb[1,3,2] recompute[0,0-1,0]");
}

TEST(RunSummaryTest, StepRecordOfAPlanHasItsShape) {
  const StepRecord record = StepRecordOfPlan(ThreeGroupPlan(), /*step=*/7);
  EXPECT_EQ(record.step, 7);
  EXPECT_THAT(record.sp_sizes, ElementsAre(2, 1, 1));
  EXPECT_THAT(record.micro_batches, ElementsAre(1, 3, 2));
  EXPECT_THAT(record.recompute,
              ElementsAre(std::make_pair(0, 0), std::make_pair(0, 1),
                          std::make_pair(0, 0)));
  EXPECT_EQ(record.plan_shape, PlanShape(ThreeGroupPlan()));
  EXPECT_EQ(record.predicted_seconds, 0.25);
}

TEST(RunSummaryTest, WhatIsWrittenIsReadBack) {
  RunSummary summary;
  summary.plan_source = "bucket";
  summary.model = "tiny";
  summary.world_size = 4;
  summary.workload = "longtail";
  summary.workload_seed = 9;
  summary.first_step = 2;
  summary.next_step = 4;
  summary.steps_requested = 6;
  summary.stopped_on_request = true;
  for (int64_t step : {2, 3}) {
    StepRecord record = StepRecordOfPlan(ThreeGroupPlan(), step);
    record.measured_seconds = 0.5 * static_cast<double>(step);
    record.loss = 5.5 - static_cast<double>(step);
    record.params_version = step;
    summary.steps.push_back(record);
  }
  const std::string path = TestPath("round_trip.json");
  ASSERT_TRUE(WriteRunSummary(path, summary).ok());
  absl::StatusOr<RunSummary> read = ReadRunSummary(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->plan_source, "bucket");
  EXPECT_EQ(read->model, "tiny");
  EXPECT_EQ(read->world_size, 4);
  EXPECT_EQ(read->workload, "longtail");
  EXPECT_EQ(read->workload_seed, 9u);
  EXPECT_EQ(read->first_step, 2);
  EXPECT_EQ(read->next_step, 4);
  EXPECT_EQ(read->steps_requested, 6);
  EXPECT_TRUE(read->stopped_on_request);
  ASSERT_EQ(read->steps.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const StepRecord& got = read->steps[i];
    const StepRecord& want = summary.steps[i];
    EXPECT_EQ(got.step, want.step);
    EXPECT_EQ(got.plan_shape, want.plan_shape);
    EXPECT_EQ(got.sp_sizes, want.sp_sizes);
    EXPECT_EQ(got.micro_batches, want.micro_batches);
    EXPECT_EQ(got.recompute, want.recompute);
    EXPECT_EQ(got.predicted_seconds, want.predicted_seconds);
    EXPECT_EQ(got.measured_seconds, want.measured_seconds);
    EXPECT_EQ(got.loss, want.loss);
    EXPECT_EQ(got.params_version, want.params_version);
  }
}

TEST(RunSummaryTest, MeansSkipTheFirstStepsAskedAndUnmeasuredOnes) {
  RunSummary summary;
  EXPECT_EQ(summary.MeanMeasuredSeconds(), 0);
  EXPECT_EQ(summary.MeanRelativeError(), 0);
  for (double measured : {4.0, 1.0, 2.0, 0.0}) {
    StepRecord record;
    record.measured_seconds = measured;
    record.predicted_seconds = 1.5;
    summary.steps.push_back(record);
  }
  EXPECT_DOUBLE_EQ(summary.MeanMeasuredSeconds(), 7.0 / 4);
  EXPECT_DOUBLE_EQ(summary.MeanMeasuredSeconds(/*from=*/1), 1.0);
  EXPECT_DOUBLE_EQ(summary.MeanPredictedSeconds(/*from=*/2), 1.5);
  // |1.5 - 4| / 4, |1.5 - 1| / 1, |1.5 - 2| / 2; the step without a
  // measurement is left out.
  EXPECT_DOUBLE_EQ(summary.MeanRelativeError(), (0.625 + 0.5 + 0.25) / 3);
  EXPECT_DOUBLE_EQ(summary.MeanRelativeError(/*from=*/1), (0.5 + 0.25) / 2);
  // Errors 0.625, 0.5, 0.25: the median, of a range, of an even count.
  EXPECT_DOUBLE_EQ(summary.MedianRelativeError(), 0.5);
  EXPECT_DOUBLE_EQ(summary.MedianRelativeError(/*from=*/0, /*to=*/1), 0.625);
  EXPECT_DOUBLE_EQ(summary.MedianRelativeError(/*from=*/1), (0.5 + 0.25) / 2);
  EXPECT_EQ(summary.MedianRelativeError(/*from=*/3), 0);
}

TEST(RunSummaryTest, ReadErrorsNameTheFileAndTheField) {
  EXPECT_EQ(ReadRunSummary(TestPath("missing.json")).status().code(),
            absl::StatusCode::kNotFound);
  const std::string path = TestPath("partial.json");
  WriteTestFile(path, R"({"plan_source": "planner", "model": 3})");
  const absl::Status status = ReadRunSummary(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("model"));
}

}  // namespace
}  // namespace dcp
