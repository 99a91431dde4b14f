#include "planner/service/step_stats_tracker.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

// Two ranks in one group of two micro-batches predicted at 1 s each.
StepPlan TwoRankPlan() {
  StepPlan plan;
  plan.group_of_rank = {0, 0};
  GroupSummary group;
  group.predicted_seconds = 2;
  group.micro_batch_compute_seconds = {1, 1};
  plan.groups.push_back(group);
  return plan;
}

v1::ReportStepStatsRequest Report(int64_t step, int rank, double seconds,
                                  double compute_seconds) {
  v1::ReportStepStatsRequest request;
  request.set_step(step);
  request.set_rank(rank);
  request.set_step_seconds(seconds);
  for (int i = 0; i < 2; ++i) {
    v1::MicroBatchStats* stats = request.add_micro_batches();
    stats->set_micro_batch_index(i);
    stats->set_compute_seconds(compute_seconds);
  }
  return request;
}

TEST(RefitAccumulatorTest, LeastSquaresFactorClampedAfterEnoughObservations) {
  RefitAccumulator refit;
  refit.Add({0.5, 0.5, 0.5});
  EXPECT_FALSE(refit.Factor().has_value());
  refit.Add({0.5});
  EXPECT_DOUBLE_EQ(refit.Factor().value(), 2);
  refit.Remove({0.5});
  EXPECT_EQ(refit.count(), 3);
  RefitAccumulator tiny;
  tiny.Add({50, 50, 50, 50});
  EXPECT_DOUBLE_EQ(tiny.Factor().value(), RefitAccumulator::kMinFactor);
  EXPECT_FALSE(RefitAccumulator::Accepts(1000));
}

TEST(StepStatsTrackerTest, ImbalanceOnceEveryRankReportedThenARefit) {
  StepStatsTracker tracker(/*world_size=*/2, /*online_refit=*/true);
  const StepPlan plan = TwoRankPlan();
  const CostParamsSnapshot params;
  auto first = tracker.Record(Report(0, 0, 2, 2), plan, 1, params).value();
  EXPECT_DOUBLE_EQ(first.measured_over_predicted, 1);
  EXPECT_DOUBLE_EQ(first.relative_error.value(), 0);
  EXPECT_FALSE(first.imbalance.has_value());
  auto second = tracker.Record(Report(0, 1, 4, 2), plan, 1, params).value();
  EXPECT_DOUBLE_EQ(second.imbalance.value(), (4 - 3.0) / 4);
  // Measured compute 2 s vs predicted 1 s on four micro-batches: twice.
  EXPECT_DOUBLE_EQ(second.refit_factor.value(), 2);
  EXPECT_EQ(second.refit_observations, 4);
  EXPECT_DOUBLE_EQ(tracker.MeanRelativeError(), 0.25);
  // A repeated report replaces the rank's earlier one.
  ASSERT_TRUE(tracker.Record(Report(0, 1, 2, 2), plan, 1, params).ok());
  EXPECT_DOUBLE_EQ(tracker.MeanRelativeError(), 0);
}

TEST(StepStatsTrackerTest, ReportsOutsideThePlanAreRefused) {
  StepStatsTracker tracker(/*world_size=*/3, /*online_refit=*/false);
  StepPlan plan = TwoRankPlan();
  plan.group_of_rank.push_back(-1);
  const CostParamsSnapshot params;
  EXPECT_THAT(
      tracker.Record(Report(1, 2, 1, 1), plan, 1, params).status().message(),
      HasSubstr("rank 2 has no group"));
  v1::ReportStepStatsRequest extra = Report(1, 0, 1, 1);
  extra.mutable_micro_batches(1)->set_micro_batch_index(2);
  EXPECT_THAT(tracker.Record(extra, plan, 1, params).status().message(),
              HasSubstr("runs 2 micro-batches"));
}

}  // namespace
}  // namespace dcp
