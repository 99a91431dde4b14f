#include "planner/simulate/plan_price.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/plan/plan_json.h"
#include "planner/plan/test_cost_model.h"
#include "planner/simulate/simulate_testing.h"
#include "planner/simulate/simulator.h"

namespace dcp {
namespace {

SimulationReport Simulated(const CostModel& cost_model, const std::string& spec,
                           int steps) {
  return SimulateSpec(cost_model, spec, /*seed=*/3, steps,
                      /*keep_plans=*/true);
}

// Every strategy's plan of every simulated batch, written as `dcp plan`
// writes it and read back, is priced at the simulator's figures.
TEST(PlanPriceTest, PricedPlansEqualTheSimulatorsFigures) {
  struct Case {
    const char* model;
    const char* workload;
    int nodes;
  };
  for (const Case& c :
       {Case{"llama3-8b", "longtail", 2}, Case{"llama3-8b", "uniform", 1},
        Case{"video-dit-1b", "video", 2}}) {
    SCOPED_TRACE(c.workload);
    const CostModel cost_model = MakeCostModel(c.model, c.nodes, 8);
    const SimulationReport report = Simulated(cost_model, c.workload, 3);
    for (const StrategyStats& stats : report.strategies) {
      for (size_t step = 0; step < stats.plans.size(); ++step) {
        SCOPED_TRACE(stats.name + " step " + std::to_string(step));
        const std::vector<int64_t>& lengths = report.batch_lengths[step];
        absl::StatusOr<Plan> read =
            PlanFromJson(PlanToJson(stats.plans[step], lengths, cost_model));
        ASSERT_TRUE(read.ok()) << read.status();
        absl::StatusOr<PlanPrice> price = PricePlan(cost_model, lengths, *read);
        ASSERT_TRUE(price.ok()) << price.status();
        EXPECT_NEAR(price->plan.predicted_step_seconds,
                    stats.step_seconds[step], 1e-9 * stats.step_seconds[step]);
        EXPECT_NEAR(price->plan.lower_bound_seconds,
                    report.lower_bound_step_seconds[step],
                    1e-9 * price->plan.lower_bound_seconds);
        EXPECT_LE(price->plan.lower_bound_seconds,
                  price->plan.predicted_step_seconds * (1 + 1e-12));
        EXPECT_LE(price->peak_memory_fraction, 1 + 1e-12);
        EXPECT_GE(price->idle_fraction, 0);
        EXPECT_LT(price->idle_fraction, 1);
        ASSERT_EQ(price->groups.size(), read->groups.size());
        for (const GroupPrice& group : price->groups) {
          EXPECT_NEAR(group.seconds + group.idle_seconds,
                      price->plan.slowest_group_seconds,
                      1e-9 * price->plan.slowest_group_seconds);
        }
      }
    }
  }
}

TEST(PlanPriceTest, RefusesWhatValidateRefuses) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = {4096, 8192, 1024};
  Plan plan;
  plan.strategy = "hand-made";
  GroupPlan group;
  group.ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  MicroBatchPlan micro_batch;
  micro_batch.sequence_indices = {0, 1, 2};
  group.micro_batches.push_back(micro_batch);
  plan.groups.push_back(group);
  ASSERT_TRUE(PricePlan(cost_model, lengths, plan).ok());

  Plan repeated = plan;
  repeated.groups[0].micro_batches[0].sequence_indices = {0, 1, 1};
  absl::Status status = PricePlan(cost_model, lengths, repeated).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);

  // A 1M-token sequence on one rank is over the memory budget.
  Plan too_big;
  for (int rank = 0; rank < 8; ++rank) {
    GroupPlan single;
    single.ranks = {rank};
    if (rank == 0) {
      MicroBatchPlan huge;
      huge.sequence_indices = {0};
      single.micro_batches.push_back(huge);
    }
    too_big.groups.push_back(single);
  }
  status =
      PricePlan(cost_model, std::vector<int64_t>{1 << 20}, too_big).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("memory"), absl::string_view::npos) << status;
}

TEST(PlanPriceTest, JsonAndTableSayTheFigures) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const SimulationReport report = Simulated(cost_model, "longtail", 1);
  absl::StatusOr<PlanPrice> price = PricePlan(
      cost_model, report.batch_lengths[0], report.strategies[0].plans[0]);
  ASSERT_TRUE(price.ok()) << price.status();
  const nlohmann::json json = nlohmann::json::parse(PlanPriceToJson(*price));
  EXPECT_DOUBLE_EQ(json["step_seconds"].get<double>(),
                   price->plan.predicted_step_seconds);
  EXPECT_EQ(json["groups"].size(), price->groups.size());
  for (const char* field : {"lower_bound_seconds", "gap_to_lower_bound",
                            "idle_fraction", "peak_memory_fraction"}) {
    EXPECT_TRUE(json[field].is_number()) << field;
  }
  const std::string table = PlanPriceToTable(*price);
  EXPECT_NE(table.find("predicted step"), std::string::npos);
  EXPECT_NE(table.find("lower bound"), std::string::npos);
}

}  // namespace
}  // namespace dcp
