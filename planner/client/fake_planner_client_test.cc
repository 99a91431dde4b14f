#include "planner/client/fake_planner_client.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

TEST(FakePlannerClientTest, RecordsRequestsAndAnswersAsProgrammed) {
  FakePlannerClient planner;
  planner.get_plan.answer = [](const v1::GetPlanRequest& request)
      -> absl::StatusOr<v1::GetPlanResponse> {
    if (request.batch().step() < 0) {
      return absl::InvalidArgumentError("negative step");
    }
    v1::GetPlanResponse response;
    response.mutable_plan()->set_step(request.batch().step());
    return response;
  };

  v1::GetPlanRequest request;
  request.set_worker_id("worker-0");
  request.mutable_batch()->set_step(3);
  absl::StatusOr<v1::GetPlanResponse> plan = planner.GetPlan(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->plan().step(), 3);
  request.mutable_batch()->set_step(-1);
  EXPECT_EQ(planner.GetPlan(request).status(),
            absl::InvalidArgumentError("negative step"));

  ASSERT_EQ(planner.get_plan.requests().size(), 2u);
  EXPECT_EQ(planner.get_plan.requests()[0].batch().step(), 3);
  EXPECT_EQ(planner.get_plan.requests()[1].worker_id(), "worker-0");

  // Methods without an answer say so.
  absl::StatusOr<v1::ListWorkersResponse> workers =
      planner.ListWorkers(v1::ListWorkersRequest());
  EXPECT_EQ(workers.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(workers.status().message(), HasSubstr("ListWorkers"));
  EXPECT_EQ(planner.list_workers.requests().size(), 1u);
  EXPECT_TRUE(planner.register_worker.requests().empty());
}

}  // namespace
}  // namespace dcp
