// Randomized property tests of the planner core over thousands of batches and
// cluster shapes: every sequence planned exactly once, memory within budget,
// identical plans for identical inputs, and
// lower bound <= dcp <= every static baseline under the model.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/plan_json.h"
#include "planner/plan/plan_testing.h"
#include "planner/search/lower_bound.h"
#include "planner/search/planner.h"
#include "planner/strategies/baselines.h"

namespace dcp {
namespace {

struct Scenario {
  ModelSpec model;
  ClusterSpec cluster;
  std::vector<int64_t> lengths;
  int64_t workload_max_length = 0;
};

// Lengths drawn log-uniformly up to what the model fits on the largest legal
// SP group, with an occasional very long sequence: skewed like real data.
// No lengths when the cluster cannot even hold the model state.
Scenario RandomScenarioOrTooSmall(std::mt19937_64& rng) {
  static const char* kModels[] = {"tiny", "llama3-8b", "video-dit-1b"};
  static const int kNodes[] = {1, 2, 4};
  static const int kGpusPerNode[] = {1, 2, 4, 8};
  Scenario scenario;
  scenario.model = *ModelPreset(kModels[rng() % 3]);
  scenario.cluster = H200Cluster(kNodes[rng() % 3], kGpusPerNode[rng() % 4]);
  scenario.cluster.usable_memory_fraction = 0.6 + 0.3 * (rng() % 100) / 100.0;
  CostModel cost_model =
      *CostModel::CreateDefault(scenario.model, scenario.cluster);
  std::vector<int> sizes = *LegalSpSizes(cost_model, {});
  // The longest sequence the largest group holds with full recompute.
  const int largest = sizes.back();
  const int64_t per_rank =
      cost_model.MaxTokensPerRank(scenario.model.num_layers, largest);
  if (per_rank == 0) return scenario;  // no lengths: too small
  const int64_t fits = std::max<int64_t>(
      1, std::min<int64_t>(per_rank * largest, int64_t{1} << 20));
  const int64_t cap = std::max<int64_t>(1, fits * (50 + rng() % 50) / 100);
  std::uniform_real_distribution<double> unit(0, 1);
  const int n = 1 + static_cast<int>(rng() % 120);
  for (int i = 0; i < n; ++i) {
    const double log_max = std::log(static_cast<double>(cap));
    const double shape = unit(rng) < 0.9 ? 0.5 : 1.0;  // mostly short
    int64_t length =
        static_cast<int64_t>(std::exp(log_max * shape * unit(rng)));
    scenario.lengths.push_back(std::clamp<int64_t>(length, 1, cap));
  }
  scenario.workload_max_length = std::max(
      cap, *std::max_element(scenario.lengths.begin(), scenario.lengths.end()));
  return scenario;
}

// Clusters too small to hold the model state at all are drawn again.
Scenario RandomScenario(std::mt19937_64& rng) {
  for (;;) {
    Scenario scenario = RandomScenarioOrTooSmall(rng);
    if (!scenario.lengths.empty()) return scenario;
  }
}

constexpr double kRelativeTolerance = 1e-9;

TEST(PlannerPropertyTest, RandomBatchesAndClusters) {
  std::mt19937_64 rng(20261130);
  constexpr int kScenarios = 4000;
  int checked = 0;
  for (int s = 0; s < kScenarios; ++s) {
    const Scenario scenario = RandomScenario(rng);
    SCOPED_TRACE(testing::Message()
                 << "scenario " << s << ": " << scenario.model.name << " on "
                 << scenario.cluster.num_nodes << "x"
                 << scenario.cluster.gpus_per_node << ", "
                 << scenario.lengths.size() << " sequences");
    const CostModel cost_model =
        *CostModel::CreateDefault(scenario.model, scenario.cluster);
    StaticOptions static_options;
    static_options.workload_max_length_tokens = scenario.workload_max_length;
    PlannerOptions options;
    options.static_options = static_options;
    const Planner planner(cost_model, options);
    absl::StatusOr<Plan> plan = planner.PlanBatch(scenario.lengths);
    ASSERT_TRUE(plan.ok()) << plan.status();

    // Every sequence exactly once, ranks partitioned, memory within budget,
    // topology respected: checked by the independent validator.
    ASSERT_TRUE(IsValidPlan(cost_model, scenario.lengths, *plan));
    EXPECT_LE(MaxPeakBytes(*plan), cost_model.MemoryBudgetBytes());

    // Same inputs, same plan (byte for byte).
    absl::StatusOr<Plan> again = planner.PlanBatch(scenario.lengths);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(PlanToJson(*plan, scenario.lengths, cost_model),
              PlanToJson(*again, scenario.lengths, cost_model));

    // The bound holds for every strategy, and dcp beats the baselines.
    absl::StatusOr<Plan> bucket =
        PlanBucket(cost_model, scenario.lengths, static_options);
    absl::StatusOr<Plan> packed =
        PlanPacked(cost_model, scenario.lengths, static_options);
    ASSERT_TRUE(bucket.ok()) << bucket.status();
    ASSERT_TRUE(packed.ok()) << packed.status();
    ASSERT_TRUE(IsValidPlan(cost_model, scenario.lengths, *bucket));
    ASSERT_TRUE(IsValidPlan(cost_model, scenario.lengths, *packed));
    const double bound = plan->lower_bound_seconds;
    ASSERT_GT(bound, 0);
    const double slack = 1 + kRelativeTolerance;
    EXPECT_LE(bound, plan->predicted_step_seconds * slack);
    EXPECT_LE(bound, bucket->predicted_step_seconds * slack);
    EXPECT_LE(bound, packed->predicted_step_seconds * slack);
    EXPECT_LE(plan->predicted_step_seconds,
              bucket->predicted_step_seconds * slack);
    EXPECT_LE(plan->predicted_step_seconds,
              packed->predicted_step_seconds * slack);
    ++checked;
  }
  EXPECT_EQ(checked, kScenarios);
}

TEST(PlannerPropertyTest, AblationsAreLegalAndBounded) {
  std::mt19937_64 rng(7);
  for (int s = 0; s < 600; ++s) {
    const Scenario scenario = RandomScenario(rng);
    const CostModel cost_model =
        *CostModel::CreateDefault(scenario.model, scenario.cluster);
    for (bool variable : {true, false}) {
      for (bool pyramid : {true, false}) {
        PlannerOptions options;
        options.variable_accumulation = variable;
        options.pyramid_recompute = pyramid;
        absl::StatusOr<Plan> plan =
            Planner(cost_model, options).PlanBatch(scenario.lengths);
        ASSERT_TRUE(plan.ok()) << plan.status();
        ASSERT_TRUE(IsValidPlan(cost_model, scenario.lengths, *plan));
        EXPECT_LE(plan->lower_bound_seconds,
                  plan->predicted_step_seconds * (1 + kRelativeTolerance));
        if (!variable) {
          // One accumulation count for every group that has enough
          // sequences to reach it.
          size_t most = 0;
          for (const GroupPlan& group : plan->groups) {
            most = std::max(most, group.micro_batches.size());
          }
          for (const GroupPlan& group : plan->groups) {
            size_t sequences = 0;
            for (const MicroBatchPlan& mb : group.micro_batches) {
              sequences += mb.sequence_indices.size();
            }
            EXPECT_EQ(group.micro_batches.size(), std::min(most, sequences));
          }
        }
        if (!pyramid) {
          std::vector<int> settings;
          for (const GroupPlan& group : plan->groups) {
            for (const MicroBatchPlan& mb : group.micro_batches) {
              settings.push_back(mb.checkpointed_layers);
            }
          }
          EXPECT_TRUE(std::all_of(settings.begin(), settings.end(),
                                  [&](int k) { return k == settings[0]; }));
        }
      }
    }
  }
}

}  // namespace
}  // namespace dcp
