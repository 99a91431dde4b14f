// A small run of the planner load test: a real server and 4 workers x 2
// ranks over gRPC for 2 steps, every call succeeding and one plan per step.

#include <string>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/service/load_test.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

LoadTestOptions SmallOptions() {
  LoadTestOptions options;
  options.workers = 4;
  options.ranks_per_worker = 2;
  options.steps = 2;
  options.model = "tiny";
  options.global_batch_samples = 64;
  options.connections = 2;
  options.threads = 4;
  return options;
}

/// Runs the load test; a failure unless it ran, every call succeeded and
/// each step was planned once.
LoadTestResult RunClean(const LoadTestOptions& options) {
  absl::StatusOr<LoadTestResult> result = RunLoadTest(options);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return LoadTestResult();
  EXPECT_TRUE(result->ok()) << FormatLoadTestText(*result);
  EXPECT_EQ(result->plans_computed, options.steps);
  return *std::move(result);
}

const RpcLatency* FindRpc(const LoadTestResult& result,
                          const std::string& name) {
  for (const RpcLatency& rpc : result.rpcs) {
    if (rpc.name == name) return &rpc;
  }
  return nullptr;
}

TEST(LoadTestSmokeTest, EveryCallSucceedsAndEachStepIsPlannedOnce) {
  absl::StatusOr<LoadTestResult> result = RunLoadTest(SmallOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->ok()) << FormatLoadTestText(*result);
  EXPECT_EQ(result->world_size, 8);
  EXPECT_EQ(result->failed_calls, 0);
  EXPECT_EQ(result->plans_computed, 2);
  EXPECT_EQ(result->plans_total_metric, 2);
  EXPECT_EQ(result->tcp_connections, 2);
  ASSERT_EQ(result->steps.size(), 2u);
  for (const LoadTestStep& step : result->steps) {
    EXPECT_EQ(step.samples, 64);
    EXPECT_GE(step.plan_ms, 0);
    EXPECT_EQ(step.cache_hits + step.waited_for_planning, 4);
    // By step and fingerprint: worker id, step and 8 bytes.
    EXPECT_LT(step.get_plan_request_bytes, 40);
  }

  const RpcLatency* get_plan = FindRpc(*result, "GetPlan");
  ASSERT_NE(get_plan, nullptr);
  EXPECT_EQ(get_plan->calls, 4 * 2);
  EXPECT_EQ(get_plan->failures, 0);
  EXPECT_GT(get_plan->calls_per_second, 0);
  EXPECT_LE(get_plan->p50_ms, get_plan->p99_ms);
  EXPECT_LE(get_plan->p99_ms, get_plan->max_ms);
  const RpcLatency* reports = FindRpc(*result, "ReportStepStats (per rank)");
  ASSERT_NE(reports, nullptr);
  EXPECT_EQ(reports->calls, 4 * 2 * 2);  // one per rank per step
  const RpcLatency* per_worker =
      FindRpc(*result, "ReportStepStats (per worker)");
  ASSERT_NE(per_worker, nullptr);
  EXPECT_EQ(per_worker->calls, 4 * 2);
  const RpcLatency* registered = FindRpc(*result, "RegisterWorker");
  ASSERT_NE(registered, nullptr);
  EXPECT_EQ(registered->calls, 4);

  EXPECT_THAT(FormatLoadTestText(*result),
              HasSubstr("plans computed: 2 for 2 steps"));
  const nlohmann::json json =
      nlohmann::json::parse(FormatLoadTestJson(*result));
  EXPECT_EQ(json["ok"], true);
  EXPECT_EQ(json["plans_computed"], 2);
  EXPECT_EQ(json["world"]["world_size"], 8);
}

TEST(LoadTestSmokeTest, WithoutAheadTheFirstCallOfEachStepWaitsForPlanning) {
  LoadTestOptions options = SmallOptions();
  options.ahead = false;
  const LoadTestResult result = RunClean(options);
  for (const LoadTestStep& step : result.steps) {
    EXPECT_FALSE(step.planned_before_fetch);
    EXPECT_GE(step.waited_for_planning, 1);
  }
}

TEST(LoadTestSmokeTest, GetPlanWithTheBatchStillWorks) {
  for (bool ahead : {true, false}) {
    LoadTestOptions options = SmallOptions();
    options.get_plan_with_batch = true;
    options.ahead = ahead;
    const LoadTestResult result = RunClean(options);
    for (const LoadTestStep& step : result.steps) {
      EXPECT_GT(step.get_plan_request_bytes, 64 * 4);  // 64 samples
    }
    EXPECT_THAT(FormatLoadTestText(result),
                HasSubstr("GetPlan with the batch"));
  }
}

TEST(LoadTestSmokeTest, DecodingEveryResponseGivesTheSamePlans) {
  const LoadTestResult once = RunClean(SmallOptions());
  LoadTestOptions options = SmallOptions();
  options.decode_every_plan = true;
  const LoadTestResult every = RunClean(options);
  ASSERT_EQ(every.steps.size(), once.steps.size());
  for (size_t i = 0; i < every.steps.size(); ++i) {
    EXPECT_EQ(every.steps[i].predicted_step_seconds,
              once.steps[i].predicted_step_seconds);
    EXPECT_EQ(every.steps[i].get_plan_response_bytes,
              once.steps[i].get_plan_response_bytes);
    EXPECT_GT(every.steps[i].get_plan_response_bytes, 64);
  }
  EXPECT_THAT(FormatLoadTestText(every),
              HasSubstr("responses decoded every one"));
  EXPECT_THAT(FormatLoadTestText(once),
              HasSubstr("responses decoded once per thread"));
}

TEST(LoadTestSmokeTest, EveryWorkerCanSubmitAProfile) {
  LoadTestOptions options = SmallOptions();
  options.profile_samples = 16;
  const LoadTestResult result = RunClean(options);
  const RpcLatency* profiles = FindRpc(result, "SubmitProfile");
  ASSERT_NE(profiles, nullptr);
  EXPECT_EQ(profiles->calls, 4);
  EXPECT_EQ(profiles->failures, 0);
  EXPECT_GE(result.profile_fits, 1);
  EXPECT_LE(result.profile_fits, 4);
  EXPECT_THAT(FormatLoadTestText(result),
              HasSubstr("profiles: 4 workers x 16 samples, fitted"));
  // Without the option there is no profile phase.
  EXPECT_EQ(FindRpc(RunClean(SmallOptions()), "SubmitProfile"), nullptr);
}

TEST(LoadTestSmokeTest, ReRegistrationsDuringStepZerosPlanningAreTheirOwnRow) {
  LoadTestOptions options = SmallOptions();
  // Every step-0 GetPlan carries the batch and waits for its plan; the
  // batch is large enough that planning outlasts some re-registrations.
  options.ahead = false;
  options.get_plan_with_batch = true;
  options.model = "llama3-8b";
  options.workers = 8;
  options.ranks_per_worker = 8;
  options.global_batch_samples = 4096;
  options.register_while_planning = 2000;
  const LoadTestResult result = RunClean(options);
  const RpcLatency* during = FindRpc(result, kRegisterWhilePlanning);
  ASSERT_NE(during, nullptr) << FormatLoadTestText(result);
  EXPECT_GT(during->calls, 0);
  EXPECT_LE(during->calls, 2000);
  EXPECT_EQ(during->failures, 0);
  EXPECT_NE(FormatLoadTestText(result).find(kRegisterWhilePlanning),
            std::string::npos);
}

TEST(LoadTestSmokeTest, RejectsBadOptions) {
  LoadTestOptions options = SmallOptions();
  options.global_batch_tokens = 1000;  // with global_batch_samples
  EXPECT_FALSE(RunLoadTest(options).ok());
  options = SmallOptions();
  options.model = "no-such-model";
  EXPECT_FALSE(RunLoadTest(options).ok());
}

}  // namespace
}  // namespace dcp
