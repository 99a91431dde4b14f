#include "planner/simulate/simulator.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/fake_clock.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/plan/test_cost_model.h"
#include "planner/workload/workload.h"
#include "planner/workload/workload_testing.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

BatchStream MakeStream(uint64_t seed = 7) {
  return MakeSpecStream("longtail:max=32768,tail_min=8192",
                        /*global_batch_tokens=*/8 * 16384, seed);
}

SimulationOptions SmallOptions() {
  SimulationOptions options;
  options.steps = 4;
  return options;
}

// llama3-8b on one node of 8 GPUs, planned at a fake time.
class SimulatorTest : public ::testing::Test {
 protected:
  const CostModel cost_model_ =
      MakeCostModel("llama3-8b", /*num_nodes=*/1, /*gpus_per_node=*/8);
  FakeClock clock_;
};

TEST_F(SimulatorTest, ReportsEveryStrategyWithSaneNumbers) {
  BatchStream stream = MakeStream();
  std::vector<int> progress_steps;
  SimulationOptions options = SmallOptions();
  options.strategies = StrategyNames();
  absl::StatusOr<SimulationReport> report =
      Simulate(cost_model_, stream, options, clock_, [&](int step, int steps) {
        EXPECT_EQ(steps, 4);
        progress_steps.push_back(step);
      });
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(progress_steps, std::vector<int>({1, 2, 3, 4}));
  EXPECT_EQ(report->steps, 4);
  EXPECT_THAT(report->workload_description, HasSubstr("longtail"));
  ASSERT_EQ(report->strategies.size(), 11u);
  const std::vector<std::string> names = StrategyNames();
  EXPECT_GT(report->lower_bound_mean_step_seconds, 0);
  for (size_t i = 0; i < names.size(); ++i) {
    const StrategyStats& stats = report->strategies[i];
    SCOPED_TRACE(stats.name);
    EXPECT_EQ(stats.name, names[i]);
    EXPECT_EQ(stats.steps, 4);
    EXPECT_GT(stats.mean_step_seconds, 0);
    EXPECT_LE(report->lower_bound_mean_step_seconds,
              stats.mean_step_seconds * (1 + 1e-12));
    EXPECT_GE(stats.mean_gap_to_lower_bound, -1e-12);
    EXPECT_GT(stats.max_memory_fraction, 0);
    EXPECT_LE(stats.max_memory_fraction, 1.0);
    EXPECT_GE(stats.mean_idle_fraction, 0);
    EXPECT_LT(stats.mean_idle_fraction, 1);
    EXPECT_GT(stats.speedup_vs_bucket, 0);
  }
  EXPECT_EQ(report->strategies[0].speedup_vs_bucket, 1.0);
  // dcp keeps its one layout unless two phases are faster, and
  // dcp-phased, which searches phases for every batch, is never slower.
  ASSERT_EQ(report->strategies[6].name, "dcp");
  ASSERT_EQ(report->strategies[7].name, "dcp-one-layout");
  ASSERT_EQ(report->strategies[10].name, "dcp-phased");
  for (int step = 0; step < 4; ++step) {
    EXPECT_LE(report->strategies[6].step_seconds[step],
              report->strategies[7].step_seconds[step]);
    EXPECT_LE(report->strategies[10].step_seconds[step],
              report->strategies[6].step_seconds[step]);
  }
  // The fake clock never moved.
  EXPECT_EQ(report->plan_latency_p50_ms, 0);
  EXPECT_EQ(report->plan_latency_p99_ms, 0);
}

TEST_F(SimulatorTest, DeterministicApartFromLatency) {
  BatchStream first_stream = MakeStream();
  BatchStream second_stream = MakeStream();
  FakeClock fake_clock;
  SteppingClock stepping_clock;
  absl::StatusOr<SimulationReport> first =
      Simulate(cost_model_, first_stream, SmallOptions(), fake_clock);
  absl::StatusOr<SimulationReport> second =
      Simulate(cost_model_, second_stream, SmallOptions(), stepping_clock);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  nlohmann::json first_json =
      nlohmann::json::parse(SimulationReportToJson(*first));
  nlohmann::json second_json =
      nlohmann::json::parse(SimulationReportToJson(*second));
  // Each dcp PlanBatch reads the stepping clock twice: 1 ms apart.
  EXPECT_EQ(second_json["plan_latency_ms"]["p50"], 1.0);
  EXPECT_EQ(second_json["plan_latency_ms"]["p99"], 1.0);
  first_json.erase("plan_latency_ms");
  second_json.erase("plan_latency_ms");
  EXPECT_EQ(first_json, second_json);
}

TEST_F(SimulatorTest, JsonHasTheDocumentedFields) {
  BatchStream stream = MakeStream();
  SimulationOptions options = SmallOptions();
  options.steps = 2;
  absl::StatusOr<SimulationReport> report =
      Simulate(cost_model_, stream, options, clock_);
  ASSERT_TRUE(report.ok()) << report.status();
  const nlohmann::json json =
      nlohmann::json::parse(SimulationReportToJson(*report));
  ASSERT_EQ(json["strategies"].size(), 9u);
  for (const nlohmann::json& stats : json["strategies"]) {
    for (const char* field :
         {"mean_step_seconds", "speedup_vs_bucket", "mean_idle_fraction",
          "max_memory_fraction", "mean_gap_to_lower_bound"}) {
      EXPECT_TRUE(stats[field].is_number()) << field;
    }
    EXPECT_TRUE(stats["name"].is_string());
  }
  EXPECT_TRUE(json["lower_bound_mean_step_seconds"].is_number());
  EXPECT_TRUE(json["plan_latency_ms"]["p50"].is_number());
  EXPECT_TRUE(json["plan_latency_ms"]["p99"].is_number());

  const std::string table = SimulationReportToTable(*report);
  EXPECT_THAT(table, HasSubstr("strategy"));
  EXPECT_THAT(table, HasSubstr("dcp-uniform-recompute"));
  EXPECT_THAT(table, HasSubstr("lower bound"));
  EXPECT_THAT(table, HasSubstr("1.00x"));
}

TEST_F(SimulatorTest, SubsetWithoutBucketStillComparesToBucket) {
  SimulationOptions options = SmallOptions();
  options.steps = 2;
  options.strategies = {"dcp", "bucket"};
  BatchStream stream = MakeStream();
  absl::StatusOr<SimulationReport> both =
      Simulate(cost_model_, stream, options, clock_);
  ASSERT_TRUE(both.ok()) << both.status();
  options.strategies = {"dcp"};
  BatchStream again = MakeStream();
  absl::StatusOr<SimulationReport> dcp_only =
      Simulate(cost_model_, again, options, clock_);
  ASSERT_TRUE(dcp_only.ok()) << dcp_only.status();
  ASSERT_EQ(dcp_only->strategies.size(), 1u);
  EXPECT_EQ(dcp_only->strategies[0].name, "dcp");
  EXPECT_EQ(dcp_only->strategies[0].speedup_vs_bucket,
            both->strategies[0].speedup_vs_bucket);
  EXPECT_EQ(both->strategies[1].name, "bucket");
}

TEST_F(SimulatorTest, RejectsBadOptions) {
  BatchStream stream = MakeStream();
  SimulationOptions options = SmallOptions();
  options.strategies = {"dcp", "magic"};
  absl::StatusOr<SimulationReport> report =
      Simulate(cost_model_, stream, options, clock_);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("unknown strategy 'magic'; valid strategies: bucket, "
                        "packed, best-static, megatron-dyncp, megatron-hcp, "
                        "videosys-dcp, dcp, dcp-one-layout, dcp-fixed-accum, "
                        "dcp-uniform-recompute, dcp-phased"));

  options.strategies = {"dcp", "dcp"};
  EXPECT_THAT(Simulate(cost_model_, stream, options, clock_).status().message(),
              HasSubstr("listed twice"));

  options = SmallOptions();
  options.steps = 0;
  EXPECT_THAT(Simulate(cost_model_, stream, options, clock_).status().message(),
              HasSubstr("steps = 0"));

  options = SmallOptions();
  options.planner_options.sp_sizes = {3};
  EXPECT_THAT(Simulate(cost_model_, stream, options, clock_).status().message(),
              HasSubstr("SP size 3"));
}

// Batches of one sequence each: 1K tokens, then 4M tokens, which does not
// fit one 8-GPU node of llama3-8b.
BatchStream ShortThenTooLong() {
  absl::StatusOr<BatchStream> stream =
      BatchStream::Create(MakeListSource({1024, 1 << 22}),
                          {/*global_batch_tokens=*/0,
                           /*global_batch_samples=*/1},
                          /*seed=*/1);
  EXPECT_TRUE(stream.ok()) << stream.status();
  return *std::move(stream);
}

TEST_F(SimulatorTest, PeersThatRegroupKeepPhasedPlans) {
  BatchStream stream = MakeStream();
  SimulationOptions options = SmallOptions();
  options.strategies = {"megatron-hcp", "videosys-dcp", "dcp"};
  options.keep_plans = true;
  absl::StatusOr<SimulationReport> report =
      Simulate(cost_model_, stream, options, clock_);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->strategies.size(), 3u);
  for (int s = 0; s < 2; ++s) {
    const StrategyStats& stats = report->strategies[s];
    SCOPED_TRACE(stats.name);
    EXPECT_TRUE(stats.plans.empty());
    ASSERT_EQ(stats.phased_plans.size(), 4u);
    double phases = 0;
    for (int step = 0; step < 4; ++step) {
      const PhasedPlan& plan = stats.phased_plans[step];
      EXPECT_EQ(plan.strategy, stats.name);
      EXPECT_DOUBLE_EQ(plan.predicted_step_seconds, stats.step_seconds[step]);
      EXPECT_DOUBLE_EQ(plan.lower_bound_seconds,
                       report->lower_bound_step_seconds[step]);
      phases += plan.phases.size();
    }
    EXPECT_DOUBLE_EQ(stats.mean_phases, phases / 4);
  }
  EXPECT_THAT(report->strategies[0].setting, HasSubstr("tokens/rank"));
  // dcp may re-group: it keeps phased plans too, its steps of one layout
  // as one phase.
  EXPECT_TRUE(report->strategies[2].plans.empty());
  ASSERT_EQ(report->strategies[2].phased_plans.size(), 4u);
  for (int step = 0; step < 4; ++step) {
    EXPECT_DOUBLE_EQ(report->strategies[2].phased_plans[step].predicted_step_seconds,
                     report->strategies[2].step_seconds[step]);
  }
  EXPECT_EQ(report->strategies[2].mean_phases, 1);
}

TEST_F(SimulatorTest, PlanningErrorsNameTheStep) {
  BatchStream stream = ShortThenTooLong();
  SimulationOptions options = SmallOptions();
  // Statically configured for the short sequence, so step 0 plans.
  // (best-static prices every batch before step 0: see the next test.)
  options.static_options.workload_max_length_tokens = 1024;
  options.strategies = {"bucket", "packed", "dcp"};
  absl::StatusOr<SimulationReport> report =
      Simulate(cost_model_, stream, options, clock_);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("step 1: "));
}

TEST_F(SimulatorTest, BestStaticSaysWhichSequenceNoStaticSizeHolds) {
  BatchStream stream = ShortThenTooLong();
  SimulationOptions options = SmallOptions();
  options.strategies = {"best-static"};
  const absl::Status status =
      Simulate(cost_model_, stream, options, clock_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      std::string(status.message()),
      AllOf(HasSubstr("best-static: no static SP size holds the workload"),
            HasSubstr("4194304 tokens")));
  // One reason, not one per size.
  EXPECT_EQ(std::string(status.message()).find("4194304"),
            std::string(status.message()).rfind("4194304"));
}

TEST_F(SimulatorTest,
       BestStaticIsNoSlowerThanAnyStaticSettingAndSaysWhichItIs) {
  const CostModel cost_model =
      MakeCostModel("llama3-8b", /*num_nodes=*/2, /*gpus_per_node=*/8);
  SimulationOptions options = SmallOptions();
  options.strategies = {"best-static", "dcp"};
  BatchStream stream = MakeStream();
  absl::StatusOr<SimulationReport> report =
      Simulate(cost_model, stream, options, clock_);
  ASSERT_TRUE(report.ok()) << report.status();
  const StrategyStats& best = report->strategies[0];
  ASSERT_EQ(best.name, "best-static");
  EXPECT_THAT(best.setting, testing::MatchesRegex("(bucket|packed) SP [0-9]+"));
  EXPECT_DOUBLE_EQ(best.speedup_vs_best_static, 1.0);
  EXPECT_GE(report->strategies[1].speedup_vs_best_static, 1.0);
  // Every fixed static setting is at least as slow on the same batches.
  for (int sp_size : {1, 2, 4, 8, 16}) {
    for (const char* kind : {"bucket", "packed"}) {
      SimulationOptions fixed = SmallOptions();
      fixed.strategies = {kind};
      fixed.static_options.sp_size = sp_size;
      BatchStream same = MakeStream();
      absl::StatusOr<SimulationReport> other =
          Simulate(cost_model, same, fixed, clock_);
      if (!other.ok()) continue;  // that size cannot hold the workload
      EXPECT_LE(best.mean_step_seconds,
                other->strategies[0].mean_step_seconds * (1 + 1e-12))
          << kind << " SP " << sp_size;
    }
  }
}

}  // namespace
}  // namespace dcp
