#include "worker/step_timing_files.h"

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/plan.h"
#include "planner/plan/test_cost_model.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const std::string dir = TestTempPath("step_timing_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

RankStepTiming TimingOf(int64_t step, int rank) {
  RankStepTiming timing;
  timing.step = step;
  timing.rank = rank;
  timing.group_index = 1;
  timing.step_seconds = 2.5;
  timing.gradient_allreduce_seconds = 0.125;
  timing.micro_batches = {{0.5, 0.25}, {1.0, 0.0}};
  return timing;
}

TEST(StepTimingFilesTest, RankTimingRoundTripsAndIdleIsTheRest) {
  const std::string dir = TestDir("round_trip");
  ASSERT_TRUE(WriteRankStepTiming(dir, TimingOf(3, 2)).ok());
  absl::StatusOr<RankStepTiming> read = ReadRankStepTiming(dir, 3, 2);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->group_index, 1);
  EXPECT_DOUBLE_EQ(read->step_seconds, 2.5);
  EXPECT_DOUBLE_EQ(read->gradient_allreduce_seconds, 0.125);
  ASSERT_EQ(read->micro_batches.size(), 2u);
  EXPECT_DOUBLE_EQ(read->micro_batches[0].compute_seconds, 0.5);
  EXPECT_DOUBLE_EQ(read->micro_batches[0].communication_seconds, 0.25);
  EXPECT_DOUBLE_EQ(read->micro_batches[1].compute_seconds, 1.0);
  EXPECT_DOUBLE_EQ(read->IdleSeconds(), 2.5 - 0.5 - 0.25 - 1.0);
  EXPECT_TRUE(absl::IsNotFound(ReadRankStepTiming(dir, 3, 0).status()));
}

TEST(StepTimingFilesTest, KeepsOnlyTheLatestSteps) {
  const std::string dir = TestDir("bounded");
  for (int64_t step = 0; step <= kKeptStepTimings; ++step) {
    ASSERT_TRUE(WriteRankStepTiming(dir, TimingOf(step, 0)).ok());
  }
  EXPECT_TRUE(absl::IsNotFound(ReadRankStepTiming(dir, 0, 0).status()));
  EXPECT_TRUE(ReadRankStepTiming(dir, 1, 0).ok());
  EXPECT_TRUE(ReadRankStepTiming(dir, kKeptStepTimings, 0).ok());
  EXPECT_EQ(CountFilesWithPrefix(dir, /*prefix=*/""), kKeptStepTimings);
}

TEST(StepTimingFilesTest, PlanFileRoundTripsWithItsCostModel) {
  const std::string dir = TestDir("plan");
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 2);
  StepPlanFile plan_file;
  plan_file.step = 7;
  GroupPlan group;
  group.ranks = {0, 1};
  group.micro_batches.resize(2);
  group.micro_batches[0].sequence_indices = {0};
  group.micro_batches[1].sequence_indices = {1, 2};
  group.micro_batches[1].checkpointed_layers = 1;
  plan_file.plan.groups = {group};
  plan_file.plan.strategy = "dcp";
  plan_file.lengths_tokens = {4096, 100, 200};
  PredictPlan(cost_model, plan_file.lengths_tokens, plan_file.plan);
  plan_file.plan_params_version = 3;
  plan_file.cost_model_params_version = 4;
  plan_file.model = cost_model.model();
  plan_file.cluster = cost_model.cluster();
  plan_file.params = cost_model.params();
  ASSERT_TRUE(WriteStepPlanFile(dir, plan_file).ok());

  absl::StatusOr<StepPlanFile> read = ReadStepPlanFile(dir, 7);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->plan_params_version, 3);
  EXPECT_EQ(read->cost_model_params_version, 4);
  EXPECT_EQ(read->lengths_tokens, plan_file.lengths_tokens);
  ASSERT_EQ(read->plan.groups.size(), 1u);
  EXPECT_EQ(read->plan.groups[0].micro_batches[1].sequence_indices,
            (std::vector<int>{1, 2}));
  EXPECT_EQ(read->plan.groups[0].micro_batches[1].checkpointed_layers, 1);
  absl::StatusOr<CostModel> priced = read->MakeCostModel();
  ASSERT_TRUE(priced.ok()) << priced.status();
  Plan again = read->plan;
  PredictPlan(*priced, read->lengths_tokens, again);
  EXPECT_NEAR(again.predicted_step_seconds,
              plan_file.plan.predicted_step_seconds,
              1e-9 * plan_file.plan.predicted_step_seconds);
}

TEST(StepTimingFilesTest, AFileOfAnotherShapeIsDataLossNamingIt) {
  const std::string dir = EmptyTestDirectory("step_timing_bad");
  WriteTestFile(absl::StrCat(dir, "/step_1.rank_0.json"), "{\"step\": 1}\n");
  const absl::Status status = ReadRankStepTiming(dir, 1, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("step_1.rank_0.json"));
  EXPECT_THAT(status.message(), HasSubstr("rank"));
}

}  // namespace
}  // namespace dcp
