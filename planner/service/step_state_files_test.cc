#include "planner/service/step_state_files.h"

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

// A state directory as the planner leaves it: job.pb and, per step, a step
// record, and a plan record for the steps in `planned`.
std::string StateDirectory(const std::vector<int64_t>& recorded,
                           const std::vector<int64_t>& planned) {
  const std::string directory = FreshTestDirectory("step_state_files_");
  std::filesystem::create_directories(directory);
  WriteTestFile(directory + "/job.pb", "");
  for (int64_t step : recorded) {
    WriteTestFile(directory + "/" + StepFileName(kStepRecordPrefix, step), "");
  }
  for (int64_t step : planned) {
    v1::StepPlanRecord plan;
    plan.set_step(step);
    plan.add_lengths_tokens(4096);
    WriteTestFile(directory + "/" + StepFileName(kStepPlanPrefix, step),
                  plan.SerializeAsString());
  }
  return directory;
}

TEST(StepStateFilesTest, FileNamesRoundTrip) {
  EXPECT_EQ(StepFileName(kStepPlanPrefix, 42), "plan_00000000000000000042.pb");
  EXPECT_EQ(StepOfFileName("plan_00000000000000000042.pb", kStepPlanPrefix),
            42);
  EXPECT_EQ(StepOfFileName("plan_00000000000000000042.pb", kStepReportsPrefix),
            std::nullopt);
  // A writer's temporary file and other names are not records.
  EXPECT_EQ(
      StepOfFileName("plan_00000000000000000042.pb~tmp.12.0", kStepPlanPrefix),
      std::nullopt);
  EXPECT_EQ(StepOfFileName("plan_42.pb", kStepPlanPrefix), std::nullopt);
  EXPECT_EQ(DescribeSteps({3, 4, 5, 7, 9, 10}), "3..5, 7, 9..10");
  EXPECT_EQ(DescribeSteps({}), "none");
}

TEST(StepStateFilesTest, ReadsAStepWithAndWithoutReports) {
  const std::string directory = StateDirectory({4, 5}, {4, 5});
  v1::StepReportsRecord reports;
  reports.set_step(5);
  reports.add_ranks()->set_rank(1);
  WriteTestFile(directory + "/" + StepFileName(kStepReportsPrefix, 5),
                reports.SerializeAsString());
  absl::StatusOr<RecordedStep> planned_only = ReadRecordedStep(directory, 4);
  ASSERT_TRUE(planned_only.ok()) << planned_only.status();
  EXPECT_EQ(planned_only->plan.lengths_tokens(0), 4096);
  EXPECT_FALSE(planned_only->reports.has_value());
  absl::StatusOr<RecordedStep> reported = ReadRecordedStep(directory, 5);
  ASSERT_TRUE(reported.ok()) << reported.status();
  ASSERT_TRUE(reported->reports.has_value());
  EXPECT_EQ(reported->reports->ranks(0).rank(), 1);
}

TEST(StepStateFilesTest, ErrorsSayWhatIsWrong) {
  absl::Status missing = ReadRecordedStep("/nonexistent/state", 0).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("no state directory"));

  const std::string directory = StateDirectory({3, 4, 5, 8}, {3, 4, 5, 8});
  absl::Status outside = ReadRecordedStep(directory, 7).status();
  EXPECT_EQ(outside.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(outside.message(), HasSubstr("steps present: 3..5, 8"));

  WriteTestFile(directory + "/" + StepFileName(kStepPlanPrefix, 8), "\xff\xff");
  absl::Status corrupt = ReadRecordedStep(directory, 8).status();
  EXPECT_EQ(corrupt.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(corrupt.message(), HasSubstr("plan_00000000000000000008.pb"));

  std::filesystem::remove(directory + "/job.pb");
  EXPECT_THAT(ReadRecordedStep(directory, 3).status().message(),
              HasSubstr("not a planner state directory"));
  WriteTestFile(directory + "/job.json", "{}");
  EXPECT_THAT(ReadRecordedStep(directory, 3).status().message(),
              HasSubstr("earlier planner release"));
}

TEST(StepStateFilesTest, APlannerThatRecordedNoPlansIsNamed) {
  // What a planner before plan records leaves: step records only.
  const std::string directory = StateDirectory({0, 1, 2}, {});
  absl::Status old = ReadRecordedStep(directory, 1).status();
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.message(), HasSubstr("steps 0..2 have step records only"));
}

}  // namespace
}  // namespace dcp
