// Randomized property tests of the baselines a user would pick instead of
// dcp (bucket, packed, best-static, megatron-hcp, videosys-dcp) on small
// instances (8-16 GPUs, up to 64 sequences), through Simulate as
// `dcp simulate` runs them: every plan valid (each sequence once, memory
// within budget), the simulator's figure for each plan equal to what
// PricePlan says of the same plan (phase by phase for the phased peers),
// and lower bound <= dcp <= every baseline, with the exact optimum
// (exact_reference.h) between the lower bound and dcp where the batch is
// small enough for it.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fake_clock.h"
#include "gtest/gtest.h"
#include "planner/exact/exact_reference.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan_testing.h"
#include "planner/simulate/plan_price.h"
#include "planner/simulate/simulator.h"
#include "planner/workload/workload.h"

namespace dcp {
namespace {

constexpr double kTolerance = 1e-9;

struct Instance {
  ModelSpec model;
  ClusterSpec cluster;
  std::vector<int64_t> lengths;
};

// Skewed lengths up to what the largest legal group holds with full
// recompute: mostly short, a few long.
Instance RandomInstance(std::mt19937_64& rng) {
  static const char* kModels[] = {"tiny", "llama3-8b", "video-dit-1b"};
  static const int kShapes[][2] = {{1, 8}, {2, 4}, {2, 8}};
  for (;;) {
    Instance instance;
    instance.model = *ModelPreset(kModels[rng() % 3]);
    const auto& shape = kShapes[rng() % 3];
    instance.cluster = H200Cluster(shape[0], shape[1]);
    instance.cluster.usable_memory_fraction = 0.6 + 0.3 * (rng() % 100) / 100.0;
    const CostModel cost_model =
        *CostModel::CreateDefault(instance.model, instance.cluster);
    const std::vector<int> sizes = *LegalSpSizes(cost_model, {});
    const int64_t per_rank = cost_model.MaxTokensPerRank(
        instance.model.num_layers, /*sp_size=*/sizes.back());
    if (per_rank == 0) continue;  // the model state alone does not fit
    const int64_t fits = std::min<int64_t>(per_rank * sizes.back(), 1 << 20);
    const int64_t cap = std::max<int64_t>(64, fits * (40 + rng() % 50) / 100);
    std::uniform_real_distribution<double> unit(0, 1);
    const int n = 1 + static_cast<int>(rng() % 64);
    for (int i = 0; i < n; ++i) {
      const double shape_power = unit(rng) < 0.85 ? 0.6 : 1.0;
      const int64_t length = static_cast<int64_t>(std::exp(
          std::log(static_cast<double>(cap)) * shape_power * unit(rng)));
      instance.lengths.push_back(std::clamp<int64_t>(length, 16, cap));
    }
    return instance;
  }
}

// PricePlan of one phase, as a plan of its own sequences.
PlanPrice PricePhase(const CostModel& cost_model,
                     const std::vector<int64_t>& lengths, const Plan& phase) {
  const PhaseBatch batch = PhaseAsBatch(lengths, phase);
  absl::StatusOr<PlanPrice> price =
      PricePlan(cost_model, batch.lengths_tokens, batch.plan);
  EXPECT_TRUE(price.ok()) << price.status();
  return price.ok() ? *price : PlanPrice{};
}

TEST(PeerPropertyTest, BaselinesAreValidPricedAsPlannedAndNoFasterThanDcp) {
  std::mt19937_64 rng(20261201);
  constexpr int kInstances = 250;
  // megatron-dyncp (the dev-branch scheduler) is planned, validated and
  // priced below but not held to dcp's step time here: dcp is not yet
  // ahead of it on every instance.
  const std::vector<std::string> baselines = {"bucket", "packed", "best-static",
                                              "megatron-hcp", "videosys-dcp"};
  std::vector<std::string> dcp_slower;
  for (int i = 0; i < kInstances; ++i) {
    const Instance instance = RandomInstance(rng);
    const std::string name = absl::StrCat(
        "instance ", i, ": ", instance.model.name, " on ",
        instance.cluster.num_nodes, "x", instance.cluster.gpus_per_node, ", ",
        instance.lengths.size(), " sequences");
    SCOPED_TRACE(name);
    const CostModel cost_model =
        *CostModel::CreateDefault(instance.model, instance.cluster);
    BatchOptions batch_options;
    batch_options.global_batch_samples =
        static_cast<int64_t>(instance.lengths.size());
    absl::StatusOr<BatchStream> stream = BatchStream::Create(
        MakeListSource(instance.lengths), batch_options, /*seed=*/1);
    ASSERT_TRUE(stream.ok()) << stream.status();
    SimulationOptions options;
    options.steps = 1;
    options.keep_plans = true;
    FakeClock clock;
    absl::StatusOr<SimulationReport> report =
        Simulate(cost_model, *stream, options, clock);
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_EQ(report->batch_lengths.size(), 1u);
    ASSERT_EQ(report->batch_lengths[0], instance.lengths);
    const double bound = report->lower_bound_step_seconds[0];
    ASSERT_GT(bound, 0);
    const double budget = cost_model.MemoryBudgetBytes();

    double dcp_seconds = 0;
    for (const StrategyStats& stats : report->strategies) {
      SCOPED_TRACE(stats.name);
      const double seconds = stats.step_seconds[0];
      EXPECT_LE(bound, seconds * (1 + kTolerance));
      if (stats.name == "dcp") dcp_seconds = seconds;
      if (!stats.phased_plans.empty()) {
        ASSERT_EQ(stats.phased_plans.size(), 1u);
        const PhasedPlan& plan = stats.phased_plans[0];
        ASSERT_TRUE(IsValidPhasedPlan(cost_model, instance.lengths, plan));
        EXPECT_LE(MaxPeakBytes(plan), budget * (1 + kTolerance));
        double priced = 0;
        if (plan.barriers) {
          // Barriers: each phase as long as PricePlan's slowest group, then
          // the last phase's exposed all-reduce.
          for (const Plan& phase : plan.phases) {
            priced += PricePhase(cost_model, instance.lengths, phase)
                          .plan.slowest_group_seconds;
          }
          priced += PricePhase(cost_model, instance.lengths, plan.phases.back())
                        .plan.exposed_allreduce_seconds;
          // ...and one optimizer step.
          priced += cost_model.OptimizerStepSeconds();
        } else {
          // Without barriers (megatron-dyncp): priced as its scheduler
          // runs; its phases never last longer than at barriers.
          PhasedPlan repriced = plan;
          PredictPhasedPlan(cost_model, instance.lengths, repriced);
          priced = repriced.predicted_step_seconds;
          PhasedPlan barriered = plan;
          barriered.barriers = true;
          PredictPhasedPlan(cost_model, instance.lengths, barriered);
          EXPECT_LE(repriced.phases_seconds,
                    barriered.phases_seconds * (1 + kTolerance));
        }
        EXPECT_NEAR(seconds, priced, kTolerance * seconds);
        EXPECT_NEAR(plan.lower_bound_seconds, bound, kTolerance * bound);
      } else {
        ASSERT_EQ(stats.plans.size(), 1u);
        const Plan& plan = stats.plans[0];
        absl::StatusOr<PlanPrice> price =
            PricePlan(cost_model, instance.lengths, plan);
        ASSERT_TRUE(price.ok()) << price.status();  // validates, memory too
        EXPECT_NEAR(seconds, price->plan.predicted_step_seconds,
                    kTolerance * seconds);
        EXPECT_NEAR(price->plan.lower_bound_seconds, bound, kTolerance * bound);
      }
    }
    ASSERT_GT(dcp_seconds, 0);
    if (instance.lengths.size() <= 8) {
      absl::StatusOr<ExactReference> exact =
          ComputeExactReference(cost_model, {}, instance.lengths);
      ASSERT_TRUE(exact.ok()) << exact.status();
      // bound <= optimum <= dcp, the optimum in [lower, upper].
      EXPECT_LE(bound, exact->upper_seconds * (1 + kTolerance));
      EXPECT_LE(exact->lower_seconds, dcp_seconds * (1 + kTolerance));
    }
    for (const StrategyStats& stats : report->strategies) {
      if (std::find(baselines.begin(), baselines.end(), stats.name) ==
          baselines.end()) {
        continue;
      }
      if (dcp_seconds > stats.step_seconds[0] * (1 + kTolerance)) {
        dcp_slower.push_back(absl::StrCat(
            name, ": dcp ", dcp_seconds, " s > ", stats.name, " ",
            stats.step_seconds[0], " s (",
            100 * (dcp_seconds / stats.step_seconds[0] - 1), "%)"));
      }
    }
  }
  // dcp is never predicted slower than a baseline here; any instance where
  // it is gets listed.
  EXPECT_TRUE(dcp_slower.empty()) << dcp_slower.size() << " instances:\n"
                                  << absl::StrJoin(dcp_slower, "\n");
}

}  // namespace
}  // namespace dcp
