#include "planner/service/step_plan.h"

#include <memory>

#include "common/fake_clock.h"
#include "cost_model/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
    v1::GlobalBatch batch;
    batch.set_step(step);
    for (int i = 0; i < 12; ++i) {
      v1::Sample* sample = batch.add_samples();
      sample->set_id(10 + i);
      sample->set_length_tokens(length_tokens + 37 * i);
    }
    return batch;
  }

  FakeClock clock_;
  ParamsVersion params_;
};

TEST_F(StepPlanTest, PlansDeterministicallyWithEverythingReportsNeed) {
  const v1::GlobalBatch batch = Batch(5, 200);
  std::shared_ptr<const StepPlan> plan =
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
  std::shared_ptr<const StepPlan> plan = MakeStepPlan(
      Batch(7, int64_t{1} << 34), params_, PlannerOptions(), 4, clock_);
  EXPECT_EQ(plan->status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plan->status.message(), HasSubstr("step 7: "));
  EXPECT_THAT(DescribeStepPlan(7, *plan), HasSubstr("step 7: not plannable: "));
  EXPECT_EQ(plan->serialized, nullptr);
}

}  // namespace
}  // namespace dcp
