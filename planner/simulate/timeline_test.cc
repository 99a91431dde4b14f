#include "planner/simulate/timeline.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "planner/search/planner.h"
#include "planner/plan/test_cost_model.h"

namespace dcp {
namespace {

constexpr double kEps = 1e-9;

// A skewed batch: one long sequence and many short ones.
std::vector<int64_t> SkewedLengths() {
  std::vector<int64_t> lengths = {131072, 65536};
  for (int i = 0; i < 60; ++i) lengths.push_back(1024 + 97 * i);
  return lengths;
}

Plan PlanOf(const CostModel& cost_model, const std::vector<int64_t>& lengths) {
  absl::StatusOr<Plan> plan = Planner(cost_model, {}).PlanBatch(lengths);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

TEST(TimelineTest, OneRowPerGroupWithPartsThatAddUpToThePrediction) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = SkewedLengths();
  const Plan plan = PlanOf(cost_model, lengths);
  absl::StatusOr<Timeline> timeline = BuildTimeline(cost_model, lengths, plan);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  ASSERT_EQ(timeline->rows.size(), plan.groups.size());
  EXPECT_EQ(timeline->num_ranks, 8);
  EXPECT_NEAR(timeline->step_seconds, plan.predicted_step_seconds, 1e-9);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const TimelineRow& row = timeline->rows[g];
    const GroupPlan& group = plan.groups[g];
    EXPECT_EQ(row.ranks, group.ranks);
    EXPECT_EQ(row.num_micro_batches,
              static_cast<int>(group.micro_batches.size()));
    EXPECT_NEAR(row.busy_seconds, group.predicted_seconds,
                1e-9 * group.predicted_seconds);
    ASSERT_EQ(row.micro_batches.size(), group.micro_batches.size());
    for (size_t m = 0; m < group.micro_batches.size(); ++m) {
      double parts = 0;
      for (const TimelineBar& bar : row.bars) {
        if (bar.micro_batch == static_cast<int>(m))
          parts += bar.duration_seconds;
      }
      EXPECT_NEAR(parts, group.micro_batches[m].predicted_seconds,
                  1e-9 * group.micro_batches[m].predicted_seconds)
          << "group " << g << " micro-batch " << m;
    }
    // Bars follow each other inside the step.
    double previous_end = 0;
    for (const TimelineBar& bar : row.bars) {
      EXPECT_GE(bar.start_seconds, previous_end - kEps);
      EXPECT_GT(bar.duration_seconds, 0);
      previous_end = bar.start_seconds + bar.duration_seconds;
      EXPECT_LE(previous_end, timeline->step_seconds + kEps);
    }
  }
}

TEST(TimelineTest, RecomputeAppearsOnlyWhereLayersAreCheckpointed) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = SkewedLengths();
  Plan plan = PlanOf(cost_model, lengths);
  // Recompute on the first micro-batch of the first group only (the
  // timeline draws any plan, whether or not it fits memory).
  for (GroupPlan& group : plan.groups) {
    for (MicroBatchPlan& micro_batch : group.micro_batches) {
      micro_batch.checkpointed_layers = 0;
    }
  }
  plan.groups[0].micro_batches[0].checkpointed_layers = 4;
  absl::StatusOr<Timeline> timeline = BuildTimeline(cost_model, lengths, plan);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  for (const TimelineRow& row : timeline->rows) {
    for (const TimelineBar& bar : row.bars) {
      if (bar.part != TimelinePart::kRecompute) continue;
      EXPECT_EQ(row.group_index, 0);
      EXPECT_EQ(bar.micro_batch, 0);
    }
  }
  const auto& bars = timeline->rows[0].bars;
  EXPECT_TRUE(std::any_of(bars.begin(), bars.end(), [](const TimelineBar& bar) {
    return bar.part == TimelinePart::kRecompute;
  }));
}

TEST(TimelineTest, ExposedAllReduceThenTheOptimizerStepEndTheStepOnEveryRow) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 2, 8);
  const std::vector<int64_t> lengths(16, 2048);  // short: little to hide behind
  const Plan plan = PlanOf(cost_model, lengths);
  absl::StatusOr<Timeline> timeline = BuildTimeline(cost_model, lengths, plan);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  ASSERT_GT(timeline->exposed_allreduce_seconds, 0);
  for (const TimelineRow& row : timeline->rows) {
    ASSERT_GE(row.bars.size(), 2u);
    const TimelineBar& all_reduce = row.bars[row.bars.size() - 2];
    EXPECT_EQ(all_reduce.part, TimelinePart::kExposedAllReduce);
    EXPECT_NEAR(all_reduce.start_seconds, timeline->slowest_group_seconds,
                kEps);
    const TimelineBar& optimizer = row.bars.back();
    EXPECT_EQ(optimizer.part, TimelinePart::kOptimizerStep);
    EXPECT_EQ(optimizer.micro_batch, -1);
    EXPECT_NEAR(optimizer.start_seconds,
                all_reduce.start_seconds + all_reduce.duration_seconds, 1e-9);
    EXPECT_DOUBLE_EQ(optimizer.duration_seconds,
                     cost_model.OptimizerStepSeconds());
    EXPECT_NEAR(optimizer.start_seconds + optimizer.duration_seconds,
                timeline->step_seconds, 1e-9);
  }
}

TEST(TimelineTest, ManyGroupsShareRowsAndEveryRankIsShownOnce) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 64, 8);  // 512 GPUs
  std::vector<int64_t> lengths;
  for (int i = 0; i < 2048; ++i) lengths.push_back(512 + (i * 7919) % 8192);
  lengths.push_back(131072);
  const Plan plan = PlanOf(cost_model, lengths);
  ASSERT_GT(plan.groups.size(), 40u);
  TimelineOptions options;
  options.max_rows = 40;
  absl::StatusOr<Timeline> timeline =
      BuildTimeline(cost_model, lengths, plan, options);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  std::set<int> sizes;
  for (const GroupPlan& group : plan.groups) sizes.insert(group.sp_size());
  EXPECT_LE(timeline->rows.size(),
            static_cast<size_t>(options.max_rows) + sizes.size());
  std::vector<int> ranks;
  int groups = 0;
  for (const TimelineRow& row : timeline->rows) {
    ranks.insert(ranks.end(), row.ranks.begin(), row.ranks.end());
    groups += row.num_groups;
    EXPECT_EQ(row.ranks.size(),
              static_cast<size_t>(row.num_groups * row.sp_size));
    EXPECT_GE(row.busy_seconds, row.min_busy_seconds);
    // The drawn group is the row's slowest member.
    EXPECT_NEAR(row.busy_seconds,
                plan.groups[row.group_index].predicted_seconds,
                1e-9 * row.busy_seconds);
  }
  std::sort(ranks.begin(), ranks.end());
  std::vector<int> all(512);
  for (int r = 0; r < 512; ++r) all[r] = r;
  EXPECT_EQ(ranks, all);
  EXPECT_EQ(groups, static_cast<int>(plan.groups.size()));
}

TEST(TimelineTest, RefusesIndicesOutsideTheBatchAndZeroRows) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = SkewedLengths();
  Plan plan = PlanOf(cost_model, lengths);
  TimelineOptions options;
  options.max_rows = 0;
  EXPECT_EQ(BuildTimeline(cost_model, lengths, plan, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  plan.groups[0].micro_batches[0].sequence_indices.push_back(999);
  absl::Status status = BuildTimeline(cost_model, lengths, plan).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("sequence 999"), absl::string_view::npos)
      << status;
  EXPECT_EQ(BuildTimeline(cost_model, lengths, Plan()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TimelineTest, MeasuredTimesMustMatchThePlanShape) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = SkewedLengths();
  const Plan plan = PlanOf(cost_model, lengths);
  absl::StatusOr<Timeline> timeline = BuildTimeline(cost_model, lengths, plan);
  ASSERT_TRUE(timeline.ok());
  std::vector<std::vector<double>> measured;
  for (const GroupPlan& group : plan.groups) {
    measured.push_back(std::vector<double>(group.micro_batches.size(), 0.5));
  }
  Timeline copy = *timeline;
  ASSERT_TRUE(AttachMeasuredSeconds(measured, 2.0, copy).ok());
  EXPECT_EQ(copy.rows[0].measured_micro_batch_seconds, measured[0]);
  EXPECT_EQ(*copy.measured_step_seconds, 2.0);

  // An empty list: that group was not measured.
  std::vector<std::vector<double>> partly = measured;
  partly[0].clear();
  copy = *timeline;
  ASSERT_TRUE(AttachMeasuredSeconds(partly, 2.0, copy).ok());
  for (const TimelineRow& row : copy.rows) {
    EXPECT_EQ(row.measured_micro_batch_seconds, partly[row.group_index]);
  }

  measured[0].push_back(0.1);
  copy = *timeline;
  EXPECT_EQ(AttachMeasuredSeconds(measured, 2.0, copy).code(),
            absl::StatusCode::kInvalidArgument);
  measured[0].pop_back();
  measured[0][0] = -1;
  EXPECT_EQ(AttachMeasuredSeconds(measured, 2.0, copy).code(),
            absl::StatusCode::kInvalidArgument);
  measured.pop_back();
  EXPECT_EQ(AttachMeasuredSeconds(measured, 2.0, copy).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
