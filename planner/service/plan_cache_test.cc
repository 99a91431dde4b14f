#include "planner/service/plan_cache.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/fake_clock.h"
#include "common/test_files.h"
#include "cost_model/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/client/batch_fingerprint.h"
#include "planner/client/proto_convert.h"
#include "planner/service/cost_params_registry.h"
#include "planner/service/planner_metrics.h"
#include "planner/service/planner_state_store.h"
#include "planner/service/request_validation.h"
#include "planner/service/step_plan.h"
#include "planner/service/step_state_files.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const v1::GlobalBatch> Batch(int64_t step) {
  auto batch = std::make_shared<v1::GlobalBatch>();
  batch->set_step(step);
  for (int i = 0; i < 8; ++i) {
    v1::Sample* sample = batch->add_samples();
    sample->set_id(100 * step + i);
    sample->set_length_tokens(64 + (step * 37 + i * 101) % 900);
  }
  return batch;
}

// A planner's parameter registry and plan cache over one state directory,
// as the handler composes them (tiny model, 4 x 1 ranks).
struct Planner {
  Planner(const std::string& directory, int window,
          MakeStepPlanFunction make_step_plan = MakeStepPlan,
          int background_threads = 0,
          std::function<void(v1::StepPlanRecord)> record_plan = nullptr,
          int64_t cached_bytes_budget = 0) {
    model = ModelPreset("tiny").value();
    cluster = H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/1);
    if (!directory.empty()) {
      v1::JobRecord job;
      *job.mutable_model() = ModelSpecToProto(model);
      store = PlannerStateStore::Open(directory, job, &state).value();
    }
    registry = std::make_unique<CostParamsRegistry>(
        model, cluster,
        std::make_shared<const CostModel>(
            CostModel::CreateDefault(model, cluster).value()),
        store.get());
    EXPECT_TRUE(registry->Load(state.params_versions).ok());
    PlanCacheOptions options;
    options.world_size = cluster.NumGpus();
    options.plan_cache_steps = window;
    options.cached_bytes_budget = cached_bytes_budget;
    options.background_planning_threads = background_threads;
    options.make_step_plan = std::move(make_step_plan);
    options.record_plan = std::move(record_plan);
    cache = std::make_unique<PlanCache>(
        options, *registry, clock, store.get(), metrics, nullptr,
        [this](const std::vector<int64_t>& steps) {
          evicted.insert(evicted.end(), steps.begin(), steps.end());
        });
    EXPECT_TRUE(cache->Load(state.steps, state.compacted_steps).ok());
    cache->Start();
  }

  std::string PlanBytes(int64_t step) {
    std::shared_ptr<const v1::GlobalBatch> batch = Batch(step);
    absl::StatusOr<std::shared_ptr<const PlannedStep>> plan =
        cache->Plan(batch, BatchFingerprint(*batch));
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? *(*plan)->serialized : "";
  }

  ModelSpec model;
  ClusterSpec cluster;
  FakeClock clock;
  NoopPlannerMetrics metrics;
  PlannerState state;
  std::unique_ptr<PlannerStateStore> store;
  std::unique_ptr<CostParamsRegistry> registry;
  std::unique_ptr<PlanCache> cache;
  std::vector<int64_t> evicted;
};

TEST(StepHistoryTest, MergesRunsOfOneVersion) {
  StepHistory history;
  for (int64_t step : {0, 1, 3, 2, 4}) history.Add(step, 0);
  history.Add(5, 1);
  history.Add(7, 1);
  EXPECT_EQ(history.num_ranges(), 3u);
  history.Add(6, 1);
  EXPECT_EQ(history.num_ranges(), 2u);
  EXPECT_EQ(history.VersionOf(3), 0);
  EXPECT_EQ(history.VersionOf(6), 1);
  EXPECT_FALSE(history.VersionOf(8).has_value());
  StepHistory reloaded(history.ToRecord());
  EXPECT_EQ(reloaded.num_ranges(), 2u);
  EXPECT_EQ(reloaded.VersionOf(7), 1);
}

TEST(PlanCacheTest, StepRecordsStayWithinTheWindow) {
  const std::string directory = FreshTestDirectory("plan_cache_");
  constexpr int kWindow = 64;
  std::map<int64_t, std::string> before;
  {
    Planner planner(directory, kWindow);
    for (int64_t step = 0; step < 500; ++step) {
      if (step == 250) {
        // A new parameter version half-way: the steps after it keep it.
        ASSERT_TRUE(planner.registry
                        ->ApplyRefit(/*epoch=*/0, /*factor=*/2,
                                     /*change_threshold=*/0.05)
                        .value()
                        .has_value());
      }
      before[step] = planner.PlanBytes(step);
    }
    EXPECT_EQ(planner.evicted.size(), 500u - kWindow);
    EXPECT_LE(CountFilesWithPrefix(directory, "step_"), kWindow);
  }
  // The directory holds O(window) step records, not O(steps): 64 step
  // records, the compacted history (two version ranges), the job, one
  // parameter version.
  EXPECT_EQ(CountFilesWithPrefix(directory, "step_"), kWindow);
  EXPECT_TRUE(std::filesystem::exists(directory + "/steps_compacted.pb"));

  Planner restarted(directory, kWindow);
  EXPECT_EQ(restarted.state.steps.size(), static_cast<size_t>(kWindow));
  EXPECT_EQ(restarted.state.compacted_steps.ranges_size(), 2);
  // Cached steps and steps that left the window come back byte for byte,
  // planned with their recorded versions.
  for (int64_t step : {499, 480, 436, 435, 300, 250, 249, 10, 0}) {
    EXPECT_EQ(restarted.PlanBytes(step), before[step]) << step;
  }
  // The window's records still guard their steps' batches.
  auto changed = std::make_shared<v1::GlobalBatch>(*Batch(499));
  changed->mutable_samples(0)->set_length_tokens(5);
  EXPECT_THAT(restarted.cache->CheckFingerprint(499, BatchFingerprint(*changed))
                  .message(),
              HasSubstr("different batch"));
}

// Cached plans count against their bytes, not only their number: with room
// for about two and a half plans, the oldest leave memory as new ones come
// (the newest is always kept), and an evicted step asked for with its batch
// is planned again byte for byte.
TEST(PlanCacheTest, CachedPlansStayWithinTheirBytes) {
  int64_t largest = 0;
  int64_t smallest = std::numeric_limits<int64_t>::max();
  std::map<int64_t, std::string> unbounded_bytes;
  {
    Planner unbounded("", /*window=*/64);
    for (int64_t step = 0; step < 10; ++step) {
      std::shared_ptr<const v1::GlobalBatch> batch = Batch(step);
      std::shared_ptr<const PlannedStep> plan =
          unbounded.cache->Plan(batch, BatchFingerprint(*batch)).value();
      largest = std::max(largest, PlannedStepBytes(*plan));
      smallest = std::min(smallest, PlannedStepBytes(*plan));
      unbounded_bytes[step] = *plan->serialized;
    }
    EXPECT_TRUE(unbounded.evicted.empty());
  }
  ASSERT_GT(largest, 1000);
  const int64_t budget = 5 * largest / 2;
  Planner bounded("", /*window=*/64, MakeStepPlan, /*background_threads=*/0,
                  nullptr, budget);
  for (int64_t step = 0; step < 10; ++step) {
    EXPECT_EQ(bounded.PlanBytes(step), unbounded_bytes[step]) << step;
  }
  // Besides the newest, at most budget / smallest plans stay; the others
  // left memory, oldest first.
  const size_t kept = 1 + static_cast<size_t>(budget / smallest);
  ASSERT_LT(kept, 10u);
  ASSERT_GE(bounded.evicted.size(), 10u - kept);
  for (size_t i = 0; i < bounded.evicted.size(); ++i) {
    EXPECT_EQ(bounded.evicted[i], static_cast<int64_t>(i));
  }
  EXPECT_TRUE(bounded.cache->Find(9, BatchFingerprint(*Batch(9))).has_value());
  EXPECT_FALSE(bounded.cache->Find(0, BatchFingerprint(*Batch(0))).has_value());
  EXPECT_EQ(bounded.PlanBytes(0), unbounded_bytes[0]);
}

/// Who submits (the cache does not check it; the handler does).
constexpr char kSubmitter[] = "w0";

/// SubmitBatches of `batch` as the handler passes it to the cache.
absl::Status Submit(PlanCache& cache, const v1::GlobalBatch& batch) {
  v1::SubmitBatchesRequest submit;
  submit.set_worker_id(kSubmitter);
  *submit.add_batches() = batch;
  SubmittedBatches batches;
  batches.fingerprints.push_back(BatchFingerprint(batch));
  batches.index_of_step[batch.step()] = 0;
  return cache.Submit(submit, batches);
}

/// A planner that blocks until `release`; shared so that an abandoned
/// planning thread may outlive the test's locals.
struct BlockedPlanner {
  std::shared_ptr<absl::Notification> entered =
      std::make_shared<absl::Notification>();
  std::shared_ptr<absl::Notification> release =
      std::make_shared<absl::Notification>();
  std::shared_ptr<absl::Notification> finished =
      std::make_shared<absl::Notification>();

  MakeStepPlanFunction Function() const {
    return [entered = entered, release = release, finished = finished](
               const v1::GlobalBatch& batch, const ParamsVersion& params,
               const PlannerOptions& options, int world_size, const Clock&) {
      if (!entered->HasBeenNotified()) entered->Notify();
      release->WaitForNotification();
      std::shared_ptr<const PlannedStep> plan =
          MakeStepPlan(batch, params, options, world_size, RealClock::Get());
      if (!finished->HasBeenNotified()) finished->Notify();
      return plan;
    };
  }
};

// The waiter itself plans (no background threads), so it is waiting on the
// plan in flight when Shutdown runs. (With a background thread the waiter
// could reach PlanByStep only after Shutdown had abandoned the background
// plan, and then rightly plan the step on demand.) The plan is released
// right after Shutdown returns, often before the waiter wakes: it must still
// be answered UNAVAILABLE, as it was about one run in three before
// RunAbandonably dropped results that arrive after abandonment.
// A step planned on demand hands its plan record to the writer and returns
// without writing it: the writer here only keeps the record (as the
// handler's StepReportsWriter queues it for its thread), so when Plan
// returns the step is recorded but its plan is not; written later, it reads
// back as the plan that was served.
TEST(PlanCacheTest, OnDemandPlanLeavesItsPlanRecordToTheWriter) {
  const std::string directory = FreshTestDirectory("plan_cache_writer_");
  std::vector<v1::StepPlanRecord> handed;
  Planner planner(directory, /*window=*/64, MakeStepPlan,
                  /*background_threads=*/0,
                  [&handed](v1::StepPlanRecord record) {
                    handed.push_back(std::move(record));
                  });
  const std::string served = planner.PlanBytes(3);
  ASSERT_EQ(handed.size(), 1u);
  EXPECT_EQ(handed[0].step(), 3);
  EXPECT_EQ(CountFilesWithPrefix(directory, "step_"), 1);
  EXPECT_EQ(CountFilesWithPrefix(directory, "plan_"), 0);
  EXPECT_FALSE(ReadRecordedStep(directory, 3).ok());
  ASSERT_TRUE(planner.store->WriteStepPlan(handed[0]).ok());
  absl::StatusOr<RecordedStep> recorded = ReadRecordedStep(directory, 3);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  v1::GetPlanResponse response;
  ASSERT_TRUE(response.ParseFromString(served));
  EXPECT_EQ(recorded->plan.plan().SerializeAsString(),
            response.plan().SerializeAsString());
  // A cached step is not recorded again.
  planner.PlanBytes(3);
  EXPECT_EQ(handed.size(), 1u);
}

TEST(PlanCacheTest, ShutdownAbandonsThePlanInFlight) {
  BlockedPlanner blocked;
  Planner planner("", /*window=*/4, blocked.Function(),
                  /*background_threads=*/0);
  ASSERT_TRUE(Submit(*planner.cache, *Batch(0)).ok());
  absl::StatusOr<std::shared_ptr<const PlannedStep>> waited;
  std::thread waiter([&] { waited = planner.cache->PlanByStep(0, 0); });
  blocked.entered->WaitForNotification();

  // Shutdown returns while the planner core is still blocked.
  absl::Notification shut_down;
  std::thread stopper([&] {
    planner.cache->Shutdown();
    shut_down.Notify();
  });
  // (A bound only to fail instead of hanging; nothing is timed.)
  const bool returned =
      shut_down.WaitForNotificationWithTimeout(absl::Seconds(30));
  EXPECT_TRUE(returned) << "Shutdown waited for the plan in flight";
  EXPECT_FALSE(blocked.finished->HasBeenNotified());
  blocked.release->Notify();
  stopper.join();
  waiter.join();
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kUnavailable)
      << waited.status();
  EXPECT_THAT(waited.status().message(), HasSubstr("shutting down"));
  // The abandoned step is not cached as planned; on demand it is planned.
  EXPECT_FALSE(planner.cache->ReadyPlan(0).ok());
  blocked.finished->WaitForNotification();
  EXPECT_TRUE(planner.cache->PlanByStep(0, 0).ok());
}

// An abandoned planning thread outlives the cache, and with it the clock
// the cache was given (a test's, or a handler's): once the cache is gone the
// thread must not read that clock any more. Reproduces a crash of
// planner_handler_fuzz_test, whose handler (and FakeClock) went away while
// a plan was still in flight.
TEST(PlanCacheTest, AnAbandonedPlanDoesNotUseTheCachesClockOnceTheCacheIsGone) {
  auto entered = std::make_shared<absl::Notification>();
  auto release = std::make_shared<absl::Notification>();
  auto finished = std::make_shared<absl::Notification>();
  auto read_time = std::make_shared<absl::Time>();
  MakeStepPlanFunction function =
      [entered, release, finished, read_time](
          const v1::GlobalBatch& batch, const ParamsVersion& params,
          const PlannerOptions& options, int world_size, const Clock& clock) {
        entered->Notify();
        release->WaitForNotification();
        *read_time = clock.Now();
        std::shared_ptr<const PlannedStep> plan =
            MakeStepPlan(batch, params, options, world_size, clock);
        finished->Notify();
        return plan;
      };
  // No background threads: the waiter's own request plans, so once the
  // plan has started the waiter is inside the cache, and it is out of it
  // (its call answered) before the cache is destroyed, as the cache's
  // callers must be.
  Planner planner("", /*window=*/4, function, /*background_threads=*/0);
  ASSERT_TRUE(Submit(*planner.cache, *Batch(0)).ok());
  std::thread waiter([&] { (void)planner.cache->PlanByStep(0, 0); });
  entered->WaitForNotification();
  planner.cache->Shutdown();  // abandons the plan in flight
  waiter.join();
  planner.cache.reset();
  release->Notify();
  finished->WaitForNotification();
  // The test's FakeClock (still alive here) stands at the Unix epoch; the
  // thread read a clock of its own instead.
  EXPECT_GT(*read_time, absl::UnixEpoch() + absl::Hours(24 * 365));
}

TEST(PlanCacheTest, ByStepNeedsASubmittedBatch) {
  Planner planner("", /*window=*/4);
  EXPECT_THAT(planner.cache->PlanByStep(3, 0).status().message(),
              HasSubstr("is unknown"));
  v1::SubmitBatchesRequest submit;
  submit.set_worker_id(kSubmitter);
  *submit.add_batches() = *Batch(3);
  SubmittedBatches batches;
  batches.fingerprints.push_back(BatchFingerprint(submit.batches(0)));
  batches.index_of_step[3] = 0;
  ASSERT_TRUE(planner.cache->Submit(submit, batches).ok());
  absl::StatusOr<std::shared_ptr<const PlannedStep>> plan =
      planner.cache->PlanByStep(3, batches.fingerprints[0]);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*(*plan)->serialized, planner.PlanBytes(3));
  EXPECT_TRUE(planner.cache->ReadyPlan(3).ok());
  EXPECT_THAT(planner.cache->ReadyPlan(4).status().message(),
              HasSubstr("has not been planned"));
}

}  // namespace
}  // namespace dcp
