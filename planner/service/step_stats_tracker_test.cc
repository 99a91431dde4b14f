#include "planner/service/step_stats_tracker.h"

#include <memory>
#include <optional>
#include <vector>

#include "cost_model/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

// Two ranks in one group of two micro-batches predicted at 1 s each.
PlannedStep TwoRankPlan() {
  PlannedStep plan;
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

TEST(StepStatsTrackerTest, AllToAllsOfTheStepAreFittedByKind) {
  StepStatsTracker tracker(/*world_size=*/2, /*online_refit=*/true);
  PlannedStep plan = TwoRankPlan();
  GroupSummary& group = plan.groups[0];
  group.inter_node = true;
  group.micro_batch_communication_seconds = {0.5, 0.5};
  group.micro_batch_all_to_all_calls = {8, 12};
  group.micro_batch_all_to_all_bus_bytes = {1e6, 4e6};
  const CostParamsSnapshot params;
  auto report = [&](int rank) {
    v1::ReportStepStatsRequest request = Report(0, rank, 3, 1);
    for (v1::MicroBatchStats& stats : *request.mutable_micro_batches()) {
      const int i = stats.micro_batch_index();
      stats.set_communication_seconds(
          group.micro_batch_all_to_all_calls[i] * 2e-4 +
          group.micro_batch_all_to_all_bus_bytes[i] / 5e8);
    }
    return request;
  };
  ASSERT_TRUE(tracker.Record(report(0), plan, 1, params).ok());
  auto second = tracker.Record(report(1), plan, 1, params).value();
  ASSERT_TRUE(second.all_to_all_inter.has_value());
  EXPECT_FALSE(second.all_to_all_intra.has_value());
  EXPECT_NEAR(second.all_to_all_inter->latency_seconds, 2e-4, 1e-9);
  EXPECT_NEAR(second.all_to_all_inter->bus_bytes_per_second, 5e8, 1);
}

TEST(StepStatsTrackerTest, ImbalanceOnceEveryRankReportedThenARefit) {
  StepStatsTracker tracker(/*world_size=*/2, /*online_refit=*/true);
  const PlannedStep plan = TwoRankPlan();
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

TEST(StepStatsTrackerTest, AnAbsurdStepTimeDoesNotCountTowardsTheError) {
  StepStatsTracker tracker(/*world_size=*/2, /*online_refit=*/true);
  const PlannedStep plan = TwoRankPlan();
  const CostParamsSnapshot params;
  ASSERT_TRUE(tracker.Record(Report(0, 0, 2, 1), plan, 1, params).ok());
  // 1e-300 s against a 2 s prediction: an error of 2e300 if it counted.
  auto absurd = tracker.Record(Report(0, 1, 1e-300, 1), plan, 1, params);
  ASSERT_TRUE(absurd.ok()) << absurd.status();
  EXPECT_FALSE(absurd->relative_error.has_value());
  EXPECT_DOUBLE_EQ(tracker.MeanRelativeError(), 0);
  // Duplicates of it, and of a sane report, leave the mean where the sane
  // reports put it.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(tracker.Record(Report(0, 1, 1e-300, 1), plan, 1, params).ok());
    ASSERT_TRUE(tracker.Record(Report(0, 1, 4, 1), plan, 1, params).ok());
    EXPECT_DOUBLE_EQ(tracker.MeanRelativeError(), 0.25);
  }
  ASSERT_TRUE(tracker.Record(Report(0, 1, 1e300, 1), plan, 1, params).ok());
  EXPECT_DOUBLE_EQ(tracker.MeanRelativeError(), 0);
}

TEST(StepStatsTrackerTest, WarmUpStepsDoNotCountTowardsTheRefit) {
  // The job's first step pays one-time costs (allocations, first use of each
  // shape): at three times the prediction it would skew the factor.
  StepStatsTracker tracker(/*world_size=*/2, /*online_refit=*/true,
                           /*record_reports=*/false,
                           /*micro_batch_refit=*/false, /*warmup_steps=*/1);
  const PlannedStep plan = TwoRankPlan();
  const CostParamsSnapshot params;
  ASSERT_TRUE(tracker.Record(Report(3, 0, 6, 3), plan, 1, params).ok());
  auto warm_up = tracker.Record(Report(3, 1, 6, 3), plan, 1, params).value();
  EXPECT_FALSE(warm_up.refit_factor.has_value());
  // Its error still counts.
  EXPECT_DOUBLE_EQ(tracker.MeanRelativeError(), 2.0 / 3);
  ASSERT_TRUE(tracker.Record(Report(4, 0, 2.5, 1.25), plan, 1, params).ok());
  auto next = tracker.Record(Report(4, 1, 2.5, 1.25), plan, 1, params).value();
  EXPECT_DOUBLE_EQ(next.refit_factor.value(), 1.25);
  EXPECT_EQ(next.refit_observations, 4);
}

TEST(StepStatsTrackerTest, MicroBatchesAtSp1AndAboveAreRefittedApart) {
  // Step 0: ranks 0 and 1 each alone (SP 1), two micro-batches of 1 s each
  // predicted, 0.8 s measured. Step 1: the two ranks as one SP-2 group, its
  // micro-batches predicted 1 s each at a version that already scaled the
  // compute at SP >= 2 by 1.25 (0.8 s at the fit), measured 1.2 s.
  StepStatsTracker tracker(/*world_size=*/2, /*online_refit=*/true);
  PlannedStep alone;
  alone.group_of_rank = {0, 1};
  GroupSummary single;
  single.predicted_seconds = 2;
  single.micro_batch_compute_seconds = {1, 1};
  single.micro_batch_sp_sizes = {1, 1};
  alone.groups = {single, single};
  PlannedStep together = TwoRankPlan();
  together.groups[0].micro_batch_sp_sizes = {2, 2};
  const CostParamsSnapshot params;
  ASSERT_TRUE(tracker.Record(Report(0, 0, 1.6, 0.8), alone, 1, params).ok());
  auto pooled =
      tracker.Record(Report(0, 1, 1.6, 0.8), alone, 1, params).value();
  // Only SP-1 micro-batches so far: the pooled factor, no SP scale.
  EXPECT_DOUBLE_EQ(pooled.refit_factor.value(), 0.8);
  EXPECT_FALSE(pooled.sp_compute_scale.has_value());
  ASSERT_TRUE(tracker
                  .Record(Report(1, 0, 2.4, 1.2), together, 1, params,
                          /*plan_communication_correction=*/1,
                          /*plan_sp_compute_correction=*/1.25)
                  .ok());
  auto apart = tracker
                   .Record(Report(1, 1, 2.4, 1.2), together, 1, params,
                           /*plan_communication_correction=*/1,
                           /*plan_sp_compute_correction=*/1.25)
                   .value();
  // SP 1: 0.8; SP 2: 1.2 measured over 0.8 predicted at the fit = 1.5, so
  // 1.5 / 0.8 beyond the SP-1 factor. Pooled it would have been 2 / 1.6.
  EXPECT_DOUBLE_EQ(apart.refit_factor.value(), 0.8);
  EXPECT_DOUBLE_EQ(apart.sp_compute_scale.value(), 1.5 / 0.8);
  EXPECT_EQ(apart.refit_observations, 8);
}

TEST(StepStatsTrackerTest, AllToAllTimeIsRefittedApartFromCompute) {
  StepStatsTracker tracker(/*world_size=*/2, /*online_refit=*/true);
  PlannedStep plan = TwoRankPlan();
  plan.groups[0].micro_batch_communication_seconds = {0.5, 0.5};
  const CostParamsSnapshot params;
  auto with_communication = [](int rank) {
    v1::ReportStepStatsRequest request = Report(0, rank, 3, 1);
    for (v1::MicroBatchStats& stats : *request.mutable_micro_batches()) {
      stats.set_communication_seconds(2);
    }
    return request;
  };
  // The plan's version already doubled the all-to-all time: predicted 0.25 s
  // at the fit against 2 s measured is eight times.
  ASSERT_TRUE(tracker
                  .Record(with_communication(0), plan, /*plan_correction=*/1,
                          params, /*plan_communication_correction=*/2)
                  .ok());
  auto second = tracker
                    .Record(with_communication(1), plan, 1, params,
                            /*plan_communication_correction=*/2)
                    .value();
  EXPECT_DOUBLE_EQ(second.refit_factor.value(), 1);
  EXPECT_DOUBLE_EQ(second.communication_refit_factor.value(), 8);
}

TEST(StepStatsTrackerTest, RecordsAStepsReportsOnceItsRanksReported) {
  // Three ranks, the third without a group (it never reports).
  StepStatsTracker tracker(/*world_size=*/3, /*online_refit=*/false,
                           /*record_reports=*/true);
  PlannedStep plan = TwoRankPlan();
  plan.group_of_rank.push_back(-1);
  const CostParamsSnapshot params;
  // Step 0: only rank 0 reports. Step 1: both.
  auto step0 = tracker.Record(Report(0, 0, 2, 0.75), plan, 1, params).value();
  EXPECT_TRUE(step0.reports_to_record.empty());
  auto first = tracker.Record(Report(1, 1, 3, 1.25), plan, 1, params).value();
  EXPECT_TRUE(first.reports_to_record.empty());
  v1::ReportStepStatsRequest last = Report(1, 0, 2.5, 0.5);
  last.mutable_micro_batches(1)->set_communication_seconds(0.125);
  last.mutable_micro_batches(1)->set_idle_seconds(0.25);
  auto complete = tracker.Record(last, plan, 1, params).value();
  // Step 1 is complete; step 0's rank 1 never reported, so step 0 is
  // recorded as it is.
  ASSERT_EQ(complete.reports_to_record.size(), 2u);
  const v1::StepReportsRecord& earlier = complete.reports_to_record[0];
  EXPECT_EQ(earlier.step(), 0);
  ASSERT_EQ(earlier.ranks_size(), 1);
  EXPECT_EQ(earlier.ranks(0).rank(), 0);
  const v1::StepReportsRecord& record = complete.reports_to_record[1];
  EXPECT_EQ(record.step(), 1);
  ASSERT_EQ(record.ranks_size(), 2);
  EXPECT_EQ(record.ranks(0).rank(), 0);
  EXPECT_EQ(record.ranks(0).step_seconds(), 2.5);
  ASSERT_EQ(record.ranks(0).micro_batches_size(), 2);
  EXPECT_EQ(record.ranks(0).micro_batches(1).micro_batch_index(), 1);
  EXPECT_EQ(record.ranks(0).micro_batches(1).compute_seconds(), 0.5);
  EXPECT_EQ(record.ranks(0).micro_batches(1).communication_seconds(), 0.125);
  EXPECT_EQ(record.ranks(0).micro_batches(1).idle_seconds(), 0.25);
  EXPECT_EQ(record.ranks(1).rank(), 1);
  EXPECT_EQ(record.ranks(1).micro_batches(0).compute_seconds(), 1.25);
  // A repeated report to a complete step records it again (only it).
  auto again = tracker.Record(Report(1, 1, 3, 1.5), plan, 1, params).value();
  ASSERT_EQ(again.reports_to_record.size(), 1u);
  EXPECT_EQ(
      again.reports_to_record[0].ranks(1).micro_batches(0).compute_seconds(),
      1.5);
  // Without record_reports nothing is asked for.
  StepStatsTracker quiet(/*world_size=*/2, /*online_refit=*/false);
  ASSERT_TRUE(quiet.Record(Report(0, 0, 1, 1), TwoRankPlan(), 1, params).ok());
  EXPECT_TRUE(quiet.Record(Report(0, 1, 1, 1), TwoRankPlan(), 1, params)
                  ->reports_to_record.empty());
}

TEST(StepStatsTrackerTest, ReportsOutsideThePlanAreRefused) {
  StepStatsTracker tracker(/*world_size=*/3, /*online_refit=*/false);
  PlannedStep plan = TwoRankPlan();
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

// A plan of one group of two ranks whose four micro-batches have the refit
// rows `rows` (their compute predictions are the rows' work).
PlannedStep FitRowsPlan(const std::vector<MicroBatchRefit::Row>& rows) {
  PlannedStep plan;
  plan.group_of_rank = {0, 0};
  GroupSummary group;
  for (const MicroBatchRefit::Row& row : rows) {
    group.micro_batch_compute_seconds.push_back(row[0]);
    group.micro_batch_fit_rows.push_back(row);
    group.predicted_seconds += row[0];
  }
  plan.groups.push_back(group);
  return plan;
}

TEST(StepStatsTrackerTest, MicroBatchTermsAreRefittedIntoANewVersion) {
  // Generated measurements: rates 1.5x slower than the fit, 20 ms per
  // micro-batch, 1 ms per layer pass, 0.2 ms per sequence per layer pass.
  const MicroBatchRefit::Coefficients truth = {1.5, 0.02, 1e-3, 2e-4};
  const ModelSpec model = ModelPreset("tiny").value();
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/1, /*gpus_per_node=*/2);
  CostParamsRegistry registry(
      model, cluster,
      std::make_shared<const CostModel>(
          CostModel::CreateDefault(model, cluster).value()),
      /*store=*/nullptr);
  StepStatsTracker tracker(/*world_size=*/2, /*online_refit=*/true,
                           /*record_reports=*/false,
                           /*micro_batch_refit=*/true);
  // Without --micro-batch-refit the same reports offer only the factor.
  StepStatsTracker factor_only(/*world_size=*/2, /*online_refit=*/true);
  const double layers = model.num_layers;
  std::vector<PlannedStep> plans;
  for (int step = 0; step < 3; ++step) {
    std::vector<MicroBatchRefit::Row> rows;
    for (int i = 0; i < 4; ++i) {
      const double passes = 2 * layers + ((i + step) % 3) * layers / 2;
      const double sequences = 1 + (3 * i + 5 * step) % 7;
      rows.push_back(
          {0.01 * (1 + i + 2 * step), 1, passes, sequences * passes});
    }
    plans.push_back(FitRowsPlan(rows));
  }
  const std::shared_ptr<const CostParamsSnapshot> params = registry.Snapshot();
  StepStatsTracker::Outcome last;
  for (int step = 0; step < 3; ++step) {
    const GroupSummary& group = plans[step].groups[0];
    for (int rank = 0; rank < 2; ++rank) {
      v1::ReportStepStatsRequest request;
      request.set_step(step);
      request.set_rank(rank);
      double total = 0;
      for (int i = 0; i < 4; ++i) {
        const double measured =
            MicroBatchRefit::Predict(group.micro_batch_fit_rows[i], truth);
        v1::MicroBatchStats* stats = request.add_micro_batches();
        stats->set_micro_batch_index(i);
        stats->set_compute_seconds(measured);
        total += measured;
      }
      request.set_step_seconds(total);
      absl::StatusOr<StepStatsTracker::Outcome> outcome =
          tracker.Record(request, plans[step], 1, *params);
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      last = *outcome;
      absl::StatusOr<StepStatsTracker::Outcome> without =
          factor_only.Record(request, plans[step], 1, *params);
      ASSERT_TRUE(without.ok()) << without.status();
      EXPECT_FALSE(without->micro_batch_fit.has_value());
    }
    if (step == 0) {
      // Four distinct rows (each rank reports the same): not enough, the
      // single factor is the fallback.
      EXPECT_FALSE(last.micro_batch_fit.has_value());
      EXPECT_TRUE(last.refit_factor.has_value());
    }
  }
  ASSERT_TRUE(last.micro_batch_fit.has_value());
  EXPECT_EQ(last.micro_batch_fit_rows, 24);
  for (int k = 0; k < MicroBatchRefit::kColumns; ++k) {
    EXPECT_NEAR((*last.micro_batch_fit)[k], truth[k], 1e-6 * truth[k]) << k;
  }

  absl::StatusOr<std::optional<int64_t>> version = registry.ApplyRefit(
      last.refit_epoch, *last.refit_factor, RefitAccumulator::kChangeThreshold,
      last.communication_refit_factor, std::nullopt, std::nullopt,
      last.micro_batch_fit);
  ASSERT_TRUE(version.ok()) << version.status();
  ASSERT_EQ(version->value_or(-1), 1);
  const std::shared_ptr<const ParamsVersion> made = registry.Version(1);
  EXPECT_TRUE(made->micro_batch_refit);
  EXPECT_NEAR(made->compute_correction, 1.5, 1e-6);
  const ComputeParams& fitted = params->fitted_params.compute;
  const ComputeParams& compute = made->cost_model->params().compute;
  EXPECT_NEAR(compute.gemm_flops_per_second, fitted.gemm_flops_per_second / 1.5,
              1e-6 * fitted.gemm_flops_per_second);
  EXPECT_NEAR(compute.micro_batch_fixed_seconds, 0.02, 1e-8);
  EXPECT_NEAR(compute.layer_fixed_seconds, 1e-3, 1e-9);
  EXPECT_NEAR(compute.sequence_layer_fixed_seconds, 2e-4, 1e-10);
  // The same fit again makes no version.
  EXPECT_FALSE(registry
                   .ApplyRefit(last.refit_epoch, *last.refit_factor,
                               RefitAccumulator::kChangeThreshold,
                               last.communication_refit_factor, std::nullopt,
                               std::nullopt, last.micro_batch_fit)
                   .value()
                   .has_value());

  // Steps leaving the window take their rows out of the fit: after steps
  // 0 and 1 leave, step 3 (as step 2) adds its 8 rows to step 2's 8.
  tracker.Forget({0, 1});
  for (int rank = 0; rank < 2; ++rank) {
    v1::ReportStepStatsRequest request;
    request.set_step(3);
    request.set_rank(rank);
    request.set_step_seconds(1);
    for (int i = 0; i < 4; ++i) {
      v1::MicroBatchStats* stats = request.add_micro_batches();
      stats->set_micro_batch_index(i);
      stats->set_compute_seconds(MicroBatchRefit::Predict(
          plans[2].groups[0].micro_batch_fit_rows[i], truth));
    }
    absl::StatusOr<StepStatsTracker::Outcome> outcome =
        tracker.Record(request, plans[2], 1, *params);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    last = *outcome;
  }
  EXPECT_EQ(last.micro_batch_fit_rows, 16);
}

}  // namespace
}  // namespace dcp
