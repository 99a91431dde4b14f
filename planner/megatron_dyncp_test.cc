#include "planner/megatron_dyncp.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "planner/phased_plan.h"
#include "planner/test_cost_model.h"

namespace dcp {
namespace {

TEST(MegatronDynCpTest, Placeholder) {
  CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  std::vector<int64_t> lengths = {32768, 16384, 8192, 4096, 4096,
                                  2048,  1024,  1024, 512,  512};
  MegatronDynCpSetting setting;
  setting.max_tokens_per_rank = 8192;
  absl::StatusOr<PhasedPlan> plan =
      PlanMegatronDynCp(cost_model, {}, lengths, setting);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(ValidatePhasedPlan(cost_model, lengths, *plan).ok());
}

}  // namespace
}  // namespace dcp
