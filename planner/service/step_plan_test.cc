#include "planner/service/step_plan.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "common/fake_clock.h"
#include "cost_model/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/test_cost_model.h"
#include "planner/search/planner.h"
#include "planner/service/test_batches.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

class StepPlanTest : public ::testing::Test {
 protected:
  StepPlanTest() {
    const ModelSpec model = ModelPreset("tiny").value();
    const ClusterSpec cluster =
        H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/1);
    params_.cost_model = std::make_shared<const CostModel>(
        CostModel::CreateDefault(model, cluster).value());
    params_.version = 3;
  }

  v1::GlobalBatch Batch(int64_t step, int64_t length_tokens) const {
    std::vector<int64_t> lengths;
    for (int i = 0; i < 12; ++i) lengths.push_back(length_tokens + 37 * i);
    return BatchOfLengths(step, lengths, /*first_id=*/10);
  }

  FakeClock clock_;
  ParamsVersion params_;
};

TEST_F(StepPlanTest, PlansDeterministicallyWithEverythingReportsNeed) {
  const v1::GlobalBatch batch = Batch(5, 200);
  std::shared_ptr<const PlannedStep> plan =
      MakeStepPlan(batch, params_, PlannerOptions(), /*world_size=*/4, clock_);
  ASSERT_TRUE(plan->status.ok()) << plan->status;
  EXPECT_EQ(
      *plan->serialized,
      *MakeStepPlan(batch, params_, PlannerOptions(), 4, clock_)->serialized);
  EXPECT_EQ(plan->params_version, 3);
  EXPECT_EQ(plan->response->params_version(), 3);
  EXPECT_FALSE(plan->response->using_default_params());
  EXPECT_EQ(plan->response->sample_ids_size(), 12);
  v1::GetPlanResponse without_ids;
  ASSERT_TRUE(
      without_ids.ParseFromString(*plan->serialized_without_sample_ids));
  EXPECT_EQ(without_ids.sample_ids_size(), 0);
  EXPECT_EQ(without_ids.plan().SerializeAsString(),
            plan->response->plan().SerializeAsString());
  // Every rank is in a group; the shape counts the plan's micro-batches.
  int micro_batches = 0;
  for (const v1::Group& group : plan->response->plan().groups()) {
    micro_batches += group.micro_batches_size();
  }
  EXPECT_EQ(plan->shape.micro_batches, micro_batches);
  ASSERT_EQ(plan->group_of_rank.size(), 4u);
  for (int group : plan->group_of_rank) {
    ASSERT_GE(group, 0);
    EXPECT_FALSE(plan->groups[group].micro_batch_compute_seconds.empty());
  }
  EXPECT_GT(plan->predicted_step_seconds, 0);
  EXPECT_GT(plan->lower_bound_seconds, 0);
  EXPECT_THAT(DescribeStepPlan(5, *plan),
              AllOf(HasSubstr("step 5: SP sizes"), HasSubstr("planned in")));
}

TEST_F(StepPlanTest, UnplannableBatchSaysWhy) {
  std::shared_ptr<const PlannedStep> plan = MakeStepPlan(
      Batch(7, int64_t{1} << 34), params_, PlannerOptions(), 4, clock_);
  EXPECT_EQ(plan->status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plan->status.message(), HasSubstr("step 7: "));
  EXPECT_THAT(DescribeStepPlan(7, *plan), HasSubstr("step 7: not plannable: "));
  EXPECT_EQ(plan->serialized, nullptr);
}

// One 200K sequence among 500 of ~1.5K on 2 x 8 GPUs (the bimodal mix
// where phases pay, README "Re-grouping within a step"): with phased
// plans on it is served as phases, each micro-batch reported phase after
// phase; off (the default), never. A batch whose single layout is within
// min_gap_to_try of the lower bound is not searched.
TEST_F(StepPlanTest, MicroBatchFitRowsAreAtTheProfileFitsRates) {
  const v1::GlobalBatch batch = Batch(5, 200);
  std::shared_ptr<const PlannedStep> plan =
      MakeStepPlan(batch, params_, PlannerOptions(), 4, clock_);
  ASSERT_TRUE(plan->status.ok()) << plan->status;
  const int layers = params_.cost_model->model().num_layers;
  int sequences = 0;
  for (const GroupSummary& group : plan->groups) {
    ASSERT_EQ(group.micro_batch_fit_rows.size(),
              group.micro_batch_compute_seconds.size());
    for (const MicroBatchRefit::Row& row : group.micro_batch_fit_rows) {
      EXPECT_GT(row[0], 0);
      EXPECT_EQ(row[1], 1);
      EXPECT_GE(row[2], 2 * layers);
      EXPECT_LE(row[2], 3 * layers);
      sequences += static_cast<int>(row[3] / row[2] + 0.5);
    }
  }
  EXPECT_EQ(sequences, 12);
  // A version whose compute time the refit doubled prices twice the work;
  // its rows (over its correction) stay at the fit's rates.
  ParamsVersion doubled = params_;
  doubled.compute_correction = 2;
  doubled.cost_model = std::make_shared<const CostModel>(
      CostModel::Create(params_.cost_model->model(),
                        params_.cost_model->cluster(),
                        ScaleComputeTime(params_.cost_model->params(), 2))
          .value());
  std::shared_ptr<const PlannedStep> again =
      MakeStepPlan(batch, doubled, PlannerOptions(), 4, clock_);
  ASSERT_TRUE(again->status.ok()) << again->status;
  for (size_t g = 0; g < plan->groups.size() && g < again->groups.size();
       ++g) {
    const auto& rows = plan->groups[g].micro_batch_fit_rows;
    const auto& doubled_rows = again->groups[g].micro_batch_fit_rows;
    if (rows.size() != doubled_rows.size()) continue;  // re-planned apart
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i][2] != doubled_rows[i][2] || rows[i][3] != doubled_rows[i][3])
        continue;
      EXPECT_NEAR(doubled_rows[i][0], rows[i][0], 1e-9 * rows[i][0]);
    }
  }
}

TEST(StepPlanPhasesTest, PhasedPlansByDefaultWhereWorthSearching) {
  ParamsVersion params;
  params.cost_model = std::make_shared<const CostModel>(
      CostModel::CreateDefault(ModelPreset("llama3-8b").value(),
                               H200Cluster(/*num_nodes=*/2,
                                           /*gpus_per_node=*/8))
          .value());
  params.version = 2;
  const v1::GlobalBatch batch = OneLongAmongShortBatch(/*step=*/7);
  FakeClock clock;
  const PhasedPlanningOptions on;
  PhasedPlanningOptions disabled;
  disabled.enabled = false;

  std::shared_ptr<const PlannedStep> off =
      StepPlanMaker(disabled)(batch, params, PlannerOptions(), 16, clock);
  ASSERT_TRUE(off->status.ok()) << off->status;
  EXPECT_EQ(off->num_phases, 1);
  EXPECT_EQ(off->response->plan().phases_size(), 0);
  ASSERT_GE(off->gap_to_lower_bound, on.min_gap_to_try);

  // On by default: MakeStepPlan is StepPlanMaker(PhasedPlanningOptions()).
  std::shared_ptr<const PlannedStep> phased =
      MakeStepPlan(batch, params, PlannerOptions(), 16, clock);
  ASSERT_TRUE(phased->status.ok()) << phased->status;
  const v1::Plan& proto = phased->response->plan();
  ASSERT_EQ(phased->num_phases, 2);
  ASSERT_EQ(proto.phases_size(), 2);
  EXPECT_EQ(proto.groups_size(), 0);
  EXPECT_LT(phased->predicted_step_seconds, off->predicted_step_seconds);
  EXPECT_EQ(proto.predicted_step_seconds(), phased->predicted_step_seconds);
  EXPECT_LE(phased->lower_bound_seconds, phased->predicted_step_seconds);
  EXPECT_THAT(DescribeStepPlan(7, *phased), HasSubstr("step 7: 2 phases, "));
  // Each rank's summary lists its micro-batches of both phases, in order.
  ASSERT_EQ(phased->group_of_rank.size(), 16u);
  for (const GroupSummary& of_rank : phased->groups) {
    EXPECT_EQ(of_rank.micro_batch_fit_rows.size(),
              of_rank.micro_batch_compute_seconds.size());
  }
  int micro_batches = 0;
  for (int rank = 0; rank < 16; ++rank) {
    ASSERT_EQ(phased->group_of_rank[rank], rank);
    int of_rank = 0;
    for (const v1::Phase& phase : proto.phases()) {
      for (const v1::Group& group : phase.groups()) {
        for (int member : group.ranks()) {
          if (member == rank) of_rank += group.micro_batches_size();
        }
      }
    }
    EXPECT_EQ(phased->groups[rank].micro_batch_compute_seconds.size(),
              static_cast<size_t>(of_rank))
        << "rank " << rank;
  }
  for (const v1::Phase& phase : proto.phases()) {
    for (const v1::Group& group : phase.groups()) {
      micro_batches += group.micro_batches_size();
    }
  }
  EXPECT_EQ(phased->shape.micro_batches, micro_batches);

  // Not searched when the single layout's gap is below the threshold.
  PhasedPlanningOptions strict = on;
  strict.min_gap_to_try = off->gap_to_lower_bound + 0.01;
  EXPECT_EQ(StepPlanMaker(strict)(batch, params, PlannerOptions(), 16, clock)
                ->response->plan()
                .SerializeAsString(),
            off->response->plan().SerializeAsString());
}

// Under ZeRO-3 the groups already run in lockstep (every micro-batch's
// collectives span every rank), so phases are tried without the flag.
TEST(StepPlanPhasesTest, ZeroThreeTriesPhasesByDefault) {
  ParamsVersion params;
  params.cost_model = std::make_shared<const CostModel>(
      MakeZero3CostModel("llama3-70b", /*num_nodes=*/4, /*gpus_per_node=*/8));
  params.version = 1;
  std::vector<int64_t> lengths;
  for (int i = 0; lengths.size() < 400; ++i) {
    lengths.push_back(i % 50 == 0 ? 16384 << (i / 50 % 3)
                                  : 1024 + (i * 389) % 3072);
  }
  const v1::GlobalBatch batch =
      BatchOfLengths(/*step=*/3, lengths, /*first_id=*/1);
  FakeClock clock;
  std::shared_ptr<const PlannedStep> planned =
      MakeStepPlan(batch, params, PlannerOptions(), 32, clock);
  ASSERT_TRUE(planned->status.ok()) << planned->status;
  absl::StatusOr<Plan> one_layout =
      Planner(*params.cost_model, PlannerOptions()).PlanBatch(lengths);
  ASSERT_TRUE(one_layout.ok()) << one_layout.status();
  EXPECT_GT(planned->num_phases, 1);
  EXPECT_LT(planned->predicted_step_seconds,
            one_layout->predicted_step_seconds);
}

}  // namespace
}  // namespace dcp
