// The communicators the workers register (backend and group cache bound)
// are what the planner's memory model counts, and plans stay within the
// budget with them counted.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "common/test_files.h"
#include "cost_model/cost_model.h"
#include "cost_model/memory_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/client/proto_convert.h"
#include "planner/service/planner_handler.h"
#include "planner/service/planner_handler_test_support.h"
#include "planner/service/planner_metrics.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

void RegisterWorldWith(PlannerHandler& handler, int nodes, int ranks_per_node,
                       const std::string& backend, int max_cached_groups) {
  for (int n = 0; n < nodes; ++n) {
    v1::RegisterWorkerRequest request = Worker(
        absl::StrCat("w", n), absl::StrCat("node", n), ranks_per_node);
    request.set_backend(backend);
    request.set_max_cached_groups(max_cached_groups);
    ASSERT_TRUE(handler.RegisterWorker(request).ok());
  }
}

MemoryParams CurrentMemory(PlannerHandler& handler) {
  return MemoryParamsFromProto(
      handler.GetClusterModel({}).value().params().memory());
}

// Every micro-batch's predicted peak, which includes the communicators,
// fits the budget; returns the largest.
double MaxPredictedPeak(const v1::Plan& plan) {
  double max_peak = 0;
  for (const v1::Group& group : plan.groups()) {
    for (const v1::MicroBatch& micro_batch : group.micro_batches()) {
      max_peak = std::max(
          max_peak, static_cast<double>(micro_batch.predicted_peak_bytes()));
    }
  }
  return max_peak;
}

TEST(PlannerHandlerCommunicatorsTest, NcclWorkersBoundIsCountedAndPlansFit) {
  FakeClock clock;
  NoopPlannerMetrics metrics;
  const PlannerHandlerOptions options = GpuOptions();
  const double budget = options.cluster.MemoryBudgetBytes();
  for (int bound : {kDefaultNcclMaxCachedGroups, 12}) {
    std::unique_ptr<PlannerHandler> handler =
        MakeHandler(options, clock, &metrics);
    RegisterWorldWith(*handler, 4, 8, "nccl", bound);
    const MemoryParams memory = CurrentMemory(*handler);
    EXPECT_EQ(memory.communicator_bytes, kNcclCommunicatorBytesH200);
    EXPECT_EQ(memory.communicators_per_rank, 1 + bound);
    const CostModel cost_model =
        CostModel::Create(options.model, options.cluster,
                          CostParamsFromProto(
                              handler->GetClusterModel({}).value().params()))
            .value();
    absl::StatusOr<v1::GetPlanResponse> plan =
        handler->GetPlan(PlanRequest("w0", MakeBatch(1)));
    ASSERT_TRUE(plan.ok()) << plan.status();
    // The default bound is what the defaults count: no new version; any
    // other bound is a version of its own.
    EXPECT_EQ(plan->params_version(),
              bound == kDefaultNcclMaxCachedGroups ? 0 : 1)
        << bound;
    const double peak = MaxPredictedPeak(plan->plan());
    EXPECT_LE(peak, budget) << bound;
    // The peaks include the communicators (the static bytes do).
    EXPECT_GE(peak, cost_model.memory().StaticBytes()) << bound;
    EXPECT_GE(cost_model.memory().StaticBytes(),
              (1 + bound) * kNcclCommunicatorBytesH200);
  }
}

TEST(PlannerHandlerCommunicatorsTest, GlooWorkersCostNoGpuMemory) {
  FakeClock clock;
  NoopPlannerMetrics metrics;
  std::unique_ptr<PlannerHandler> handler =
      MakeHandler(CpuOptions(), clock, &metrics);
  // Before any registration the H200 defaults count NCCL's.
  EXPECT_EQ(CurrentMemory(*handler).communicator_bytes,
            kNcclCommunicatorBytesH200);
  RegisterWorldWith(*handler, 4, 1, "gloo", /*max_cached_groups=*/0);
  EXPECT_EQ(CurrentMemory(*handler).communicator_bytes, 0);
  absl::StatusOr<v1::GetPlanResponse> plan =
      handler->GetPlan(PlanRequest("w0", MakeBatch(1, /*n=*/8)));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->params_version(), 1);
  // Still the defaults (no profile fit): the workers profile as before.
  EXPECT_TRUE(plan->using_default_params());
  EXPECT_TRUE(handler->GetClusterModel({}).value().using_default_params());
}

TEST(PlannerHandlerCommunicatorsTest, WorkersWithAnotherBoundAreRefused) {
  FakeClock clock;
  NoopPlannerMetrics metrics;
  std::unique_ptr<PlannerHandler> handler =
      MakeHandler(GpuOptions(), clock, &metrics);
  ASSERT_TRUE(handler->RegisterWorker(Worker("w0", "node0", 8)).ok());
  v1::RegisterWorkerRequest other = Worker("w1", "node1", 8);
  other.set_max_cached_groups(kDefaultNcclMaxCachedGroups + 1);
  absl::StatusOr<v1::RegisterWorkerResponse> refused =
      handler->RegisterWorker(other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr("'w1'"), HasSubstr("'w0'"),
                    HasSubstr("--max-cached-groups")));
  // An unbounded NCCL cache is refused outright.
  other.set_max_cached_groups(0);
  refused = handler->RegisterWorker(other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr("unbounded"), HasSubstr("--max-cached-groups")));
  // The job still counts the first worker's bound.
  EXPECT_EQ(CurrentMemory(*handler).communicators_per_rank,
            1 + kDefaultNcclMaxCachedGroups);
}

// The workers' communicators are a durable version: a restarted planner
// plans with them before anyone registers again.
TEST(PlannerHandlerCommunicatorsTest, CountedCommunicatorsSurviveARestart) {
  FakeClock clock;
  NoopPlannerMetrics metrics;
  PlannerHandlerOptions options = GpuOptions();
  options.state_dir = FreshTestDirectory("communicators");
  {
    std::unique_ptr<PlannerHandler> handler =
        MakeHandler(options, clock, &metrics);
    RegisterWorldWith(*handler, 4, 8, "nccl", /*max_cached_groups=*/2);
    handler->Shutdown();
  }
  std::unique_ptr<PlannerHandler> restarted =
      MakeHandler(options, clock, &metrics);
  EXPECT_EQ(CurrentMemory(*restarted).communicators_per_rank, 3);
  EXPECT_TRUE(restarted->GetClusterModel({}).value().using_default_params());
  // A profile fit keeps them.
  ASSERT_TRUE(restarted->SubmitProfile(Profile(options, "w0", 1)).ok());
  v1::GetClusterModelResponse fitted = restarted->GetClusterModel({}).value();
  EXPECT_FALSE(fitted.using_default_params());
  EXPECT_EQ(fitted.params().memory().communicators_per_rank(), 3);
  EXPECT_EQ(fitted.params().memory().communicator_bytes(),
            kNcclCommunicatorBytesH200);
}

}  // namespace
}  // namespace dcp
