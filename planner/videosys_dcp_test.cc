#include "planner/videosys_dcp.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "planner/phased_plan.h"
#include "planner/test_cost_model.h"

namespace dcp {
namespace {

TEST(VideoSysDcpTest, Placeholder) {
  CostModel cost_model = MakeCostModel("video-dit-1b", 1, 8);
  std::vector<int64_t> lengths = {183600, 42120, 11960, 5265,
                                  5265,   1024,  256,   256};
  absl::StatusOr<PhasedPlan> plan = PlanVideoSysDcp(cost_model, {}, lengths);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(ValidatePhasedPlan(cost_model, lengths, *plan).ok());
}

}  // namespace
}  // namespace dcp
