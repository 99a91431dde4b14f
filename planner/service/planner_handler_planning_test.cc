// The handler end to end: each step planned once, batches submitted ahead,
// requests by step, eviction. Over 600 lines: one topic, the plan cache seen
// through the handler's RPCs, whose cases share the handler test support.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/fake_clock.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/client/batch_fingerprint.h"
#include "planner/service/planner_handler.h"
#include "planner/service/planner_handler_test_support.h"
#include "planner/service/planner_metrics.h"
#include "planner/service/test_batches.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(PlannerHandlerTest, EachStepIsPlannedOnceEvenUnderConcurrency) {
  FakeClock clock;
  RecordingMetrics metrics;
  LogLines log;
  auto handler = MakeHandler(GpuOptions(), clock, &metrics, &log);
  RegisterWorld(*handler, 4, 8);
  for (int64_t step = 0; step < 3; ++step) {
    const v1::GlobalBatch batch = MakeBatch(step);
    std::vector<std::string> serialized(16);
    std::vector<std::shared_ptr<const std::string>> shared(16);
    std::vector<std::thread> threads;
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([&, t] {
        const v1::GetPlanRequest request =
            PlanRequest(absl::StrCat("w", t % 4), batch);
        if (t % 2 == 0) {
          absl::StatusOr<v1::GetPlanResponse> response =
              handler->GetPlan(request);
          ASSERT_TRUE(response.ok()) << response.status();
          serialized[t] = response->SerializeAsString();
        } else {
          absl::StatusOr<std::shared_ptr<const std::string>> bytes =
              handler->GetSerializedPlan(request);
          ASSERT_TRUE(bytes.ok()) << bytes.status();
          shared[t] = *bytes;
          serialized[t] = **bytes;
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(metrics.plans_computed(), step + 1);
    for (int t = 1; t < 16; ++t) EXPECT_EQ(serialized[t], serialized[0]);
    // Every serialized caller shares one buffer.
    for (int t = 3; t < 16; t += 2) EXPECT_EQ(shared[t], shared[1]);
    v1::GetPlanResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(serialized[1]));
    EXPECT_EQ(parsed.plan().step(), step);
    ASSERT_EQ(parsed.sample_ids_size(), batch.samples_size());
    EXPECT_EQ(parsed.sample_ids(5), batch.samples(5).id());
    int ranks = 0;
    for (const v1::Group& group : parsed.plan().groups()) {
      ranks += group.ranks_size();
      EXPECT_EQ(group.sp_size(), group.ranks_size());
    }
    EXPECT_EQ(ranks, 32);
    // The plan's shape is reported once, as the served plan has it.
    const std::vector<PlanShapeReport> shapes = metrics.shapes();
    ASSERT_EQ(shapes.size(), static_cast<size_t>(step + 1));
    const PlanShapeReport expected = ShapeOf(parsed.plan());
    EXPECT_EQ(shapes.back().groups_by_sp_size, expected.groups_by_sp_size);
    EXPECT_GT(shapes.back().micro_batches, 0);
    EXPECT_EQ(shapes.back().micro_batches, expected.micro_batches);
    EXPECT_DOUBLE_EQ(shapes.back().mean_checkpointed_layers,
                     expected.mean_checkpointed_layers);
    EXPECT_EQ(shapes.back().max_checkpointed_layers,
              expected.max_checkpointed_layers);
    EXPECT_GT(parsed.plan().predicted_step_seconds(), 0);
    EXPECT_GT(parsed.plan().lower_bound_seconds(), 0);
    EXPECT_LE(parsed.plan().lower_bound_seconds(),
              parsed.plan().predicted_step_seconds() * (1 + 1e-9));
  }
  // One log line per planned step, in the documented form.
  int step_lines = 0;
  for (const std::string& line : log.lines()) {
    if (line.rfind("step ", 0) != 0) continue;
    ++step_lines;
    EXPECT_THAT(line, AllOf(HasSubstr(": SP sizes "), HasSubstr("x"),
                            HasSubstr(" micro-batches, predicted "),
                            HasSubstr(" s, lower bound "), HasSubstr("(gap "),
                            HasSubstr("%), planned in 0.0 ms")));
  }
  EXPECT_EQ(step_lines, 3);
}

// Holds the handler's planning of a step: StepPlanned is reported from the
// planning thread before the plan is handed to the waiting requests.
class PlanningLatch final : public NoopPlannerMetrics {
 public:
  void StepPlanned(int64_t, double, bool) override {
    planning.Notify();
    release.WaitForNotification();
  }
  absl::Notification planning;
  absl::Notification release;
};

TEST(PlannerHandlerTest, GetPlansWaitingForAStepDoNotBlockOtherCalls) {
  FakeClock clock;
  PlanningLatch latch;
  auto handler = MakeHandler(GpuOptions(), clock, &latch);
  RegisterWorld(*handler, 4, 8);
  constexpr int kWaiting = 8;
  std::vector<absl::StatusOr<std::shared_ptr<const std::string>>> plans(
      kWaiting);
  std::vector<std::thread> threads;
  for (int t = 0; t < kWaiting; ++t) {
    threads.emplace_back([&, t] {
      plans[t] = handler->GetSerializedPlan(
          PlanRequest(absl::StrCat("w", t % 4), MakeBatch(0)));
    });
  }
  latch.planning.WaitForNotification();
  // Step 0 is being planned and every GetPlan for it waits; the other
  // calls answer at once.
  v1::RegisterWorkerRequest moved = Worker("w0", "node0", 8);
  moved.set_address("10.0.0.7:29500");
  absl::StatusOr<v1::RegisterWorkerResponse> registered =
      handler->RegisterWorker(moved);
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(registered->rendezvous_address(), "10.0.0.7:29500");
  EXPECT_EQ(handler->ListWorkers({})->workers_size(), 4);
  EXPECT_EQ(handler->GetClusterModel({})->params_version(), 0);
  EXPECT_TRUE(handler->SubmitBatches(SubmitRequest({MakeBatch(1)})).ok());
  EXPECT_THAT(handler
                  ->ReportStepStats(StepReport("w1", /*step=*/0, /*rank=*/8,
                                               /*step_seconds=*/1))
                  .status()
                  .message(),
              HasSubstr("still planning"));
  latch.release.Notify();
  for (std::thread& thread : threads) thread.join();
  for (const auto& plan : plans) {
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(**plan, **plans[0]);
  }
}

TEST(PlannerHandlerTest, StepWithADifferentBatchIsRejected) {
  FakeClock clock;
  auto handler = MakeHandler(GpuOptions(), clock, nullptr);
  RegisterWorld(*handler, 4, 8);
  ASSERT_TRUE(handler->GetPlan(PlanRequest("w0", MakeBatch(5))).ok());
  v1::GlobalBatch changed = MakeBatch(5);
  changed.mutable_samples(0)->set_length_tokens(77);
  absl::StatusOr<v1::GetPlanResponse> response =
      handler->GetPlan(PlanRequest("w1", changed));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(response.status().message(),
              AllOf(HasSubstr("step 5 was submitted or planned with a "
                              "different batch (fingerprint "),
                    HasSubstr("a step's batch must not change")));
  EXPECT_EQ(handler->SubmitBatches(SubmitRequest({changed})).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PlannerHandlerTest, OnlyARegisteredWorkersBatchClaimsItsStep) {
  FakeClock clock;
  auto handler = MakeHandler(GpuOptions(), clock, nullptr);
  RegisterWorld(*handler, 4, 8);
  v1::GlobalBatch foreign = MakeBatch(5);
  foreign.mutable_samples(0)->set_length_tokens(77);
  // Anonymous, or from a worker id that never registered: refused, and the
  // step stays free.
  v1::SubmitBatchesRequest anonymous;
  *anonymous.add_batches() = foreign;
  EXPECT_EQ(handler->SubmitBatches(anonymous).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::SubmitBatchesRequest stranger = anonymous;
  stranger.set_worker_id("stranger");
  EXPECT_EQ(handler->SubmitBatches(stranger).status().code(),
            absl::StatusCode::kNotFound);
  v1::GetPlanRequest anonymous_plan = PlanRequest("", foreign);
  EXPECT_THAT(handler->GetPlan(anonymous_plan).status().message(),
              HasSubstr("worker_id is empty; GetPlan with a batch decides"));
  // The job's own batch for step 5 is planned; asking by step may be
  // anonymous (it only reads).
  ASSERT_TRUE(handler->GetPlan(PlanRequest("w1", MakeBatch(5))).ok());
  EXPECT_TRUE(handler->GetPlan(StepRequest(/*worker=*/"", 5)).ok());
}

TEST(PlannerHandlerTest, SubmittedBatchesArePlannedAhead) {
  FakeClock clock;
  RecordingMetrics metrics;
  PlannerHandlerOptions options = GpuOptions();
  options.background_planning_threads = 2;
  auto handler = MakeHandler(options, clock, &metrics);
  RegisterWorld(*handler, 4, 8);
  // Step 10 twice: repeats are harmless.
  absl::StatusOr<v1::SubmitBatchesResponse> accepted =
      handler->SubmitBatches(SubmitRequest(
          {MakeBatch(10), MakeBatch(11), MakeBatch(12), MakeBatch(10)}));
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_EQ(accepted->accepted(), 4);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (metrics.plans_computed() < 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(metrics.plans_computed(), 3);
  for (int64_t step = 10; step < 13; ++step) {
    absl::StatusOr<v1::GetPlanResponse> plan =
        handler->GetPlan(PlanRequest("w0", MakeBatch(step)));
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->plan().step(), step);
  }
  EXPECT_EQ(metrics.plans_computed(), 3);
  // Invalid batches name their index.
  v1::SubmitBatchesRequest bad = SubmitRequest({MakeBatch(20), MakeBatch(21)});
  bad.mutable_batches(1)->mutable_samples(0)->set_length_tokens(-5);
  absl::StatusOr<v1::SubmitBatchesResponse> rejected =
      handler->SubmitBatches(bad);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rejected.status().message(), HasSubstr("batches[1].samples[0]"));
  handler->Shutdown();
  handler->Shutdown();
  // After shutdown, submitted batches are planned on demand.
  EXPECT_EQ(handler->SubmitBatches(SubmitRequest({MakeBatch(30)}))->accepted(),
            1);
  EXPECT_EQ(metrics.plans_computed(), 3);
  EXPECT_TRUE(handler->GetPlan(PlanRequest("w0", MakeBatch(30))).ok());
  EXPECT_EQ(metrics.plans_computed(), 4);
}

TEST(PlannerHandlerTest, AtMost256SubmittedBatchesWaitToBePlanned) {
  FakeClock clock;
  RecordingMetrics metrics;
  PlannerHandlerOptions options = GpuOptions();
  options.background_planning_threads = 0;  // nothing plans them ahead
  auto handler = MakeHandler(options, clock, &metrics);
  RegisterWorld(*handler, 4, 8);
  std::vector<v1::GlobalBatch> batches;
  for (int64_t step = 0; step < 256; ++step) {
    batches.push_back(MakeBatch(step, 4));
  }
  const v1::SubmitBatchesRequest many = SubmitRequest(std::move(batches));
  ASSERT_TRUE(handler->SubmitBatches(many).ok());
  ASSERT_TRUE(handler->SubmitBatches(many).ok());  // nothing new
  const v1::SubmitBatchesRequest one_more = SubmitRequest({MakeBatch(256, 4)});
  absl::StatusOr<v1::SubmitBatchesResponse> refused =
      handler->SubmitBatches(one_more);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("256 submitted batches are waiting to be planned and "
                        "this request adds 1; at most 256"));
  // Planning one makes room for one.
  ASSERT_TRUE(handler->GetPlan(StepRequest("w0", 0)).ok());
  EXPECT_TRUE(handler->SubmitBatches(one_more).ok());
  EXPECT_EQ(handler->SubmitBatches(one_more)->accepted(), 1);
  EXPECT_EQ(metrics.plans_computed(), 1);
}

TEST(PlannerHandlerTest, WaitingBatchesAreBoundedByTheMemoryBudget) {
  FakeClock clock;
  RecordingMetrics metrics;
  PlannerHandlerOptions options = GpuOptions();
  options.background_planning_threads = 0;  // nothing plans them ahead
  // A 20,000-sequence batch holds about 1 MiB; a quarter of 10 MiB is for
  // waiting batches, so two wait and a third is refused (the count bound,
  // 256, is far).
  options.memory_budget_bytes = 10 << 20;
  auto handler = MakeHandler(options, clock, &metrics);
  RegisterWorld(*handler, 4, 8);
  const v1::SubmitBatchesRequest two =
      SubmitRequest({MakeBatch(0, 20000), MakeBatch(1, 20000)});
  ASSERT_TRUE(handler->SubmitBatches(two).ok());
  const v1::SubmitBatchesRequest third = SubmitRequest({MakeBatch(2, 20000)});
  absl::StatusOr<v1::SubmitBatchesResponse> refused =
      handler->SubmitBatches(third);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("--memory-budget=10.0 MiB"));
  EXPECT_THAT(refused.status().message(), HasSubstr("budget of 2.5 MiB"));
  // A GetPlan carrying the batch is held to the same budget.
  absl::StatusOr<v1::GetPlanResponse> on_demand =
      handler->GetPlan(PlanRequest("w0", MakeBatch(2, 20000)));
  EXPECT_EQ(on_demand.status().code(), absl::StatusCode::kResourceExhausted);
  // Planning one makes room for one.
  ASSERT_TRUE(handler->GetPlan(StepRequest("w0", 0)).ok());
  EXPECT_TRUE(handler->SubmitBatches(third).ok());
  // One batch beyond the whole budget is refused even when none wait.
  auto fresh = MakeHandler(options, clock, &metrics);
  RegisterWorld(*fresh, 4, 8);
  const v1::SubmitBatchesRequest huge = SubmitRequest({MakeBatch(0, 60000)});
  EXPECT_EQ(fresh->SubmitBatches(huge).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(PlannerHandlerTest, WaitingBatchesAreBoundedByPredictedPlanningTime) {
  FakeClock clock;
  RecordingMetrics metrics;
  PlannerHandlerOptions options = GpuOptions();
  options.background_planning_threads = 0;
  const double one = PredictedPlanningSeconds(/*num_sequences=*/100000);
  EXPECT_GT(one, 0.1);
  // The planner core is near-linear in the batch's sequences.
  EXPECT_NEAR(PredictedPlanningSeconds(200000), 2 * one, 1e-9 * one);
  options.max_queued_planning = absl::Seconds(2.5 * one);
  auto handler = MakeHandler(options, clock, &metrics);
  RegisterWorld(*handler, 4, 8);
  const v1::SubmitBatchesRequest two =
      SubmitRequest({MakeBatch(0, 100000), MakeBatch(1, 100000)});
  ASSERT_TRUE(handler->SubmitBatches(two).ok());
  absl::StatusOr<v1::SubmitBatchesResponse> refused =
      handler->SubmitBatches(SubmitRequest({MakeBatch(2, 100000)}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("--max-queued-planning"));
  // Small batches still fit beside them.
  EXPECT_TRUE(handler->SubmitBatches(SubmitRequest({MakeBatch(3, 48)})).ok());
}

TEST(PlannerHandlerTest, LazyPlanningWithoutBackgroundThreads) {
  FakeClock clock;
  RecordingMetrics metrics;
  auto handler = MakeHandler(GpuOptions(), clock, &metrics);
  RegisterWorld(*handler, 4, 8);
  EXPECT_EQ(handler->SubmitBatches(SubmitRequest({MakeBatch(0), MakeBatch(1)}))
                ->accepted(),
            2);
  EXPECT_EQ(metrics.plans_computed(), 0);
  ASSERT_TRUE(handler->GetPlan(PlanRequest("w0", MakeBatch(1))).ok());
  EXPECT_EQ(metrics.plans_computed(), 1);
}

/// A planner that keeps 2 plans in memory, with steps 0, 1 and 2 planned
/// (`first` holds their serialized plans): step 0's has been evicted.
class EvictionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PlannerHandlerOptions options = GpuOptions();
    options.plan_cache_steps = 2;
    handler = MakeHandler(options, clock, &metrics);
    RegisterWorld(*handler, 4, 8);
    for (int64_t step = 0; step < 3; ++step) {
      first.push_back(
          *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(step)))
               .value());
    }
  }

  FakeClock clock;
  RecordingMetrics metrics;
  std::unique_ptr<PlannerHandler> handler;
  std::vector<std::string> first;
};

TEST_F(EvictionTest, EvictedPlansAreReplannedIdentically) {
  EXPECT_EQ(metrics.plans_computed(), 3);
  EXPECT_EQ(
      *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(2))).value(),
      first[2]);
  EXPECT_EQ(metrics.plans_computed(), 3);  // cached
  EXPECT_EQ(
      *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(0))).value(),
      first[0]);
  EXPECT_EQ(metrics.plans_computed(), 4);  // evicted, planned again
}

TEST(PlannerHandlerTest, SubmittedStepsAreServedByStep) {
  FakeClock clock;
  RecordingMetrics metrics;
  auto handler = MakeHandler(GpuOptions(), clock, &metrics);
  RegisterWorld(*handler, 4, 8);
  ASSERT_TRUE(
      handler->SubmitBatches(SubmitRequest({MakeBatch(0), MakeBatch(1)})).ok());
  EXPECT_EQ(metrics.plans_computed(), 0);
  // Without background threads the first request by step plans it.
  absl::StatusOr<std::shared_ptr<const std::string>> by_step =
      handler->GetSerializedPlan(StepRequest("w0", 1));
  ASSERT_TRUE(by_step.ok()) << by_step.status();
  EXPECT_EQ(metrics.plans_computed(), 1);
  // With the fingerprint the caller holds the batch: the same plan without
  // sample_ids (one shared buffer of its own).
  const uint64_t fingerprint = BatchFingerprint(MakeBatch(1));
  absl::StatusOr<std::shared_ptr<const std::string>> checked =
      handler->GetSerializedPlan(StepRequest("w1", 1, fingerprint));
  ASSERT_TRUE(checked.ok()) << checked.status();
  v1::GetPlanResponse full;
  ASSERT_TRUE(full.ParseFromString(**by_step));
  v1::GetPlanResponse without_ids;
  ASSERT_TRUE(without_ids.ParseFromString(**checked));
  EXPECT_EQ(without_ids.sample_ids_size(), 0);
  EXPECT_EQ(full.sample_ids_size(), MakeBatch(1).samples_size());
  full.clear_sample_ids();
  EXPECT_EQ(without_ids.SerializeAsString(), full.SerializeAsString());
  absl::StatusOr<std::shared_ptr<const std::string>> checked_again =
      handler->GetSerializedPlan(StepRequest("w0", 1, fingerprint));
  ASSERT_TRUE(checked_again.ok());
  EXPECT_EQ(*checked_again, *checked);
  absl::StatusOr<std::shared_ptr<const std::string>> with_batch =
      handler->GetSerializedPlan(PlanRequest("w2", MakeBatch(1)));
  ASSERT_TRUE(with_batch.ok());
  EXPECT_EQ(*with_batch, *by_step);
  v1::GetPlanRequest both = PlanRequest("w3", MakeBatch(1));
  both.set_step(1);
  both.set_batch_fingerprint(fingerprint);
  EXPECT_EQ(handler->GetSerializedPlan(both).value(), *by_step);
  absl::StatusOr<v1::GetPlanResponse> step0 =
      handler->GetPlan(StepRequest("w0", 0));
  ASSERT_TRUE(step0.ok()) << step0.status();
  EXPECT_EQ(step0->plan().step(), 0);
  ASSERT_EQ(step0->sample_ids_size(), 48);
  EXPECT_EQ(step0->sample_ids(3), MakeBatch(0).samples(3).id());
  EXPECT_EQ(metrics.plans_computed(), 2);
  // A step planned from a GetPlan with samples is served by step too.
  ASSERT_TRUE(handler->GetPlan(PlanRequest("w0", MakeBatch(7))).ok());
  EXPECT_EQ(handler->GetPlan(StepRequest("w1", 7))->plan().step(), 7);
  EXPECT_EQ(metrics.plans_computed(), 3);
  // Requests by step mark the worker active at that step.
  v1::ListWorkersResponse workers = handler->ListWorkers({}).value();
  EXPECT_EQ(workers.workers(1).state(), v1::WorkerInfo::ACTIVE);
  EXPECT_EQ(workers.workers(1).last_step(), 7);
}

TEST(PlannerHandlerTest, ConcurrentRequestsByStepPlanOnce) {
  FakeClock clock;
  RecordingMetrics metrics;
  PlannerHandlerOptions options = GpuOptions();
  options.background_planning_threads = 1;
  auto handler = MakeHandler(options, clock, &metrics);
  RegisterWorld(*handler, 4, 8);
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(handler->SubmitBatches(SubmitRequest({MakeBatch(step)})).ok());
    const uint64_t fingerprint = BatchFingerprint(MakeBatch(step));
    std::vector<std::shared_ptr<const std::string>> plans(16);
    std::vector<std::thread> threads;
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([&, t] {
        absl::StatusOr<std::shared_ptr<const std::string>> plan =
            handler->GetSerializedPlan(StepRequest(
                absl::StrCat("w", t % 4), step, t % 2 ? fingerprint : 0));
        ASSERT_TRUE(plan.ok()) << plan.status();
        plans[t] = *plan;
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(metrics.plans_computed(), step + 1);
    // One shared buffer per kind of answer: without the fingerprint (with
    // sample_ids) and with it (without).
    for (int t = 2; t < 16; ++t) EXPECT_EQ(plans[t], plans[t % 2]);
  }
}

TEST(PlannerHandlerTest, ByStepWithAnotherFingerprintNamesBoth) {
  FakeClock clock;
  auto handler = MakeHandler(GpuOptions(), clock, nullptr);
  RegisterWorld(*handler, 4, 8);
  ASSERT_TRUE(handler->GetPlan(PlanRequest("w0", MakeBatch(4))).ok());
  const uint64_t recorded = BatchFingerprint(MakeBatch(4));
  const uint64_t other = BatchFingerprint(MakeBatch(4, 48, /*salt=*/1));
  ASSERT_NE(recorded, other);
  absl::StatusOr<v1::GetPlanResponse> response =
      handler->GetPlan(StepRequest("w1", 4, other));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      response.status().message(),
      AllOf(
          HasSubstr(absl::StrFormat("batch_fingerprint = %016x", other)),
          HasSubstr(absl::StrFormat(
              "step 4 was recorded with batch fingerprint %016x", recorded))));
  // Before planning too: a submitted step's fingerprint is recorded.
  ASSERT_TRUE(handler->SubmitBatches(SubmitRequest({MakeBatch(5)})).ok());
  EXPECT_EQ(handler->GetPlan(StepRequest("w1", 5, other)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PlannerHandlerTest, UnknownStepByStepIsFailedPrecondition) {
  FakeClock clock;
  RecordingMetrics metrics;
  auto handler = MakeHandler(GpuOptions(), clock, &metrics);
  // While the world is incomplete, that is the answer.
  ASSERT_TRUE(handler->RegisterWorker(Worker("w0", "node0", 8)).ok());
  EXPECT_THAT(handler->GetPlan(StepRequest("w0", 3)).status().message(),
              HasSubstr("the world is incomplete"));
  RegisterWorld(*handler, 4, 8);
  for (const v1::GetPlanRequest& request :
       {StepRequest("w0", 3), StepRequest("w0", 3, /*fingerprint=*/77)}) {
    absl::StatusOr<v1::GetPlanResponse> response = handler->GetPlan(request);
    EXPECT_EQ(response.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(response.status().message(),
              "step 3 is unknown: submit its batch (SubmitBatches or GetPlan "
              "with samples) first");
  }
  // A request with nothing at all asks for step 0.
  v1::GetPlanRequest nothing;
  nothing.set_worker_id("w0");
  EXPECT_THAT(handler->GetPlan(nothing).status().message(),
              HasSubstr("step 0 is unknown"));
  EXPECT_EQ(handler->GetPlan(StepRequest("stranger", 3)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(metrics.plans_computed(), 0);
}

TEST_F(EvictionTest, EvictedStepsNeedTheirBatchAgain) {
  EXPECT_EQ(*handler->GetSerializedPlan(StepRequest("w0", 2)).value(),
            first[2]);
  absl::StatusOr<std::shared_ptr<const std::string>> evicted =
      handler->GetSerializedPlan(StepRequest("w0", 0));
  EXPECT_EQ(evicted.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(evicted.status().message(),
              AllOf(HasSubstr("step 0's plan is no longer in memory"),
                    HasSubstr("older than the last 2 planned steps"),
                    HasSubstr("ask again with the batch's samples")));
  // The fingerprint is still checked first.
  EXPECT_THAT(handler->GetPlan(StepRequest("w0", 0, /*fingerprint=*/5))
                  .status()
                  .message(),
              HasSubstr("was recorded with batch fingerprint"));
  EXPECT_EQ(metrics.plans_computed(), 3);
  // Sent again (with GetPlan, or SubmitBatches), it is planned identically
  // and served by step.
  EXPECT_EQ(
      *handler->GetSerializedPlan(PlanRequest("w0", MakeBatch(0))).value(),
      first[0]);
  EXPECT_EQ(*handler->GetSerializedPlan(StepRequest("w1", 0)).value(),
            first[0]);
  EXPECT_EQ(metrics.plans_computed(), 4);
  // Step 1 was evicted by step 0's return.
  ASSERT_TRUE(handler->SubmitBatches(SubmitRequest({MakeBatch(1)})).ok());
  EXPECT_EQ(*handler->GetSerializedPlan(StepRequest("w1", 1)).value(),
            first[1]);
  EXPECT_EQ(metrics.plans_computed(), 5);
}

TEST(PlannerHandlerTest, UnplannableBatchIsResourceExhausted) {
  FakeClock clock;
  auto handler = MakeHandler(GpuOptions(), clock, nullptr);
  RegisterWorld(*handler, 4, 8);
  v1::GlobalBatch batch = MakeBatch(0, 4);
  batch.mutable_samples(2)->set_length_tokens(2'000'000'000);
  absl::StatusOr<v1::GetPlanResponse> response =
      handler->GetPlan(PlanRequest("w0", batch));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(response.status().message(), HasSubstr("step 0: "));
  // The same request gets the same answer; reports for it are refused.
  EXPECT_EQ(handler->GetPlan(PlanRequest("w1", batch)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(handler
                ->ReportStepStats(StepReport("w0", /*step=*/0, /*rank=*/0,
                                             /*step_seconds=*/1))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PlannerHandlerTest, AFailedBatchDoesNotClaimItsStep) {
  const std::string directory = FreshTestDirectory("failed_step_");
  FakeClock clock;
  PlannerHandlerOptions options = GpuOptions();
  options.state_dir = directory;
  v1::GlobalBatch unplannable = MakeBatch(0, 4);
  unplannable.mutable_samples(2)->set_length_tokens(2'000'000'000);
  const v1::GlobalBatch good = MakeBatch(0, 4);
  {
    auto handler = MakeHandler(options, clock, nullptr);
    RegisterWorld(*handler, 4, 8);
    EXPECT_EQ(handler->GetPlan(PlanRequest("w0", unplannable)).status().code(),
              absl::StatusCode::kResourceExhausted);
    // The step's real batch replaces it, also when submitted ahead.
    ASSERT_TRUE(handler->SubmitBatches(SubmitRequest({good})).ok());
    absl::StatusOr<v1::GetPlanResponse> plan =
        handler->GetPlan(PlanRequest("w0", good));
    ASSERT_TRUE(plan.ok()) << plan.status();
    // A planned step's batch still may not change.
    EXPECT_EQ(handler->GetPlan(PlanRequest("w0", unplannable)).status().code(),
              absl::StatusCode::kFailedPrecondition);
    // An unplannable batch submitted ahead for another step gives way too.
    v1::GlobalBatch unplannable_1 = MakeBatch(1, 4);
    unplannable_1.mutable_samples(0)->set_length_tokens(2'000'000'000);
    EXPECT_EQ(
        handler->GetPlan(PlanRequest("w0", unplannable_1)).status().code(),
        absl::StatusCode::kResourceExhausted);
  }
  // After a restart the failed batch has left no claim on disk.
  auto restarted = MakeHandler(options, clock, nullptr);
  RegisterWorld(*restarted, 4, 8);
  EXPECT_TRUE(restarted->GetPlan(PlanRequest("w0", good)).ok());
  absl::StatusOr<v1::GetPlanResponse> step_1 =
      restarted->GetPlan(PlanRequest("w0", MakeBatch(1, 4)));
  EXPECT_TRUE(step_1.ok()) << step_1.status();
}

// With phased plans on (dcp_planner's default), a batch of one very long
// sequence among many short ones is served as phases, and the workers'
// reports (micro-batches counted phase after phase) are taken; off
// (--phased-plans=false), the same batch gets one layout.
TEST(PlannerHandlerTest, ServesPhasedPlansByDefaultAndTakesTheirReports) {
  const v1::GlobalBatch batch = OneLongAmongShortBatch(/*step=*/0);
  for (const bool phased : {false, true}) {
    SCOPED_TRACE(phased ? "default" : "phased plans off");
    FakeClock clock;
    RecordingMetrics metrics;
    PlannerHandlerOptions options = GpuOptions();
    options.cluster = H200Cluster(/*num_nodes=*/2, /*gpus_per_node=*/8);
    if (!phased) {
      PhasedPlanningOptions off;
      off.enabled = false;
      options.make_step_plan = StepPlanMaker(off);
    }
    auto handler = MakeHandler(options, clock, &metrics);
    RegisterWorld(*handler, 2, 8);
    absl::StatusOr<v1::GetPlanResponse> response =
        handler->GetPlan(PlanRequest("w0", batch));
    ASSERT_TRUE(response.ok()) << response.status();
    const v1::Plan& plan = response->plan();
    EXPECT_EQ(plan.phases_size(), phased ? 2 : 0);
    EXPECT_EQ(plan.groups_size() == 0, phased);
    // Every rank reports its micro-batches in the order it ran them.
    for (int rank = 0; rank < 16; ++rank) {
      // A rank's report is checked against its group's prediction (the
      // phased plan's: the whole step; a plan of one layout's: its group's
      // micro-batches, without the optimizer step).
      double predicted = plan.predicted_step_seconds();
      for (const v1::Group& group : plan.groups()) {
        if (std::find(group.ranks().begin(), group.ranks().end(), rank) !=
            group.ranks().end()) {
          predicted = group.predicted_seconds();
        }
      }
      v1::ReportStepStatsRequest report =
          StepReport(absl::StrCat("w", rank / 8), /*step=*/0, rank,
                     /*step_seconds=*/predicted);
      int index = 0;
      auto add_group_of = [&](const auto& groups, int phase) {
        for (const v1::Group& group : groups) {
          if (std::find(group.ranks().begin(), group.ranks().end(), rank) ==
              group.ranks().end()) {
            continue;
          }
          for (int m = 0; m < group.micro_batches_size(); ++m) {
            v1::MicroBatchStats* stats = report.add_micro_batches();
            stats->set_micro_batch_index(index++);
            stats->set_phase(phase);
            stats->set_compute_seconds(0.01);
          }
        }
      };
      if (phased) {
        for (int p = 0; p < plan.phases_size(); ++p) {
          add_group_of(plan.phases(p).groups(), p);
        }
      } else {
        add_group_of(plan.groups(), 0);
      }
      absl::StatusOr<v1::ReportStepStatsResponse> answer =
          handler->ReportStepStats(report);
      ASSERT_TRUE(answer.ok()) << "rank " << rank << ": " << answer.status();
      EXPECT_NEAR(answer->measured_over_predicted(), 1.0, 1e-9);
    }
    // One more micro-batch than the rank ran is refused.
    v1::ReportStepStatsRequest extra =
        StepReport("w0", /*step=*/0, /*rank=*/0, /*step_seconds=*/1);
    extra.add_micro_batches()->set_micro_batch_index(1000);
    EXPECT_EQ(handler->ReportStepStats(extra).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace dcp
