#include "planner/service/worker_registry.h"

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "common/test_files.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/memory_model.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/service/planner_metrics.h"
#include "planner/service/planner_state_store.h"
#include "planner/service/request_validation.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

v1::RegisterWorkerRequest TestWorker(const std::string& id,
                                     const std::string& node, int num_ranks) {
  v1::RegisterWorkerRequest request;
  request.set_worker_id(id);
  request.set_node_name(node);
  request.set_num_ranks(num_ranks);
  request.set_address(absl::StrCat(node, ":29500"));
  return request;
}

// The registry as the handler drives it (validation first), with the
// handler's method names, so that the tests moved here from
// planner_handler_test read as before.
class ValidatingRegistry {
 public:
  ValidatingRegistry(const Clock& clock, PlannerMetrics* metrics)
      : cluster_(H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/8)),
        registry_(ModelPreset("llama3-8b").value(), cluster_, absl::Seconds(60),
                  clock, /*store=*/nullptr,
                  metrics != nullptr ? *metrics : noop_, nullptr) {}

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) {
    if (absl::Status status =
            ValidateRegisterWorkerRequest(request, cluster_.gpus_per_node);
        !status.ok()) {
      return status;
    }
    return registry_.Register(request);
  }
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest&) {
    return registry_.List();
  }

 private:
  NoopPlannerMetrics noop_;
  const ClusterSpec cluster_;
  WorkerRegistry registry_;
};

// llama3-8b on 4 nodes x 8 GPUs, as planner_handler_test's GpuOptions.
std::unique_ptr<ValidatingRegistry> MakeGpuRegistry(const Clock& clock,
                                                    PlannerMetrics* metrics) {
  return std::make_unique<ValidatingRegistry>(clock, metrics);
}

// Counts registered workers. Thread-safe.
class RecordingMetrics final : public NoopPlannerMetrics {
 public:
  void RegisteredWorkers(int workers) override { workers_.store(workers); }
  int registered_workers() const { return workers_.load(); }

 private:
  std::atomic<int> workers_{0};
};

v1::RegisterWorkerRequest Worker(const std::string& id, const std::string& node,
                                 int num_ranks) {
  v1::RegisterWorkerRequest request = TestWorker(id, node, num_ranks);
  request.set_gpu_kind("H200");
  request.set_backend("nccl");
  request.set_max_cached_groups(kDefaultNcclMaxCachedGroups);
  request.set_libtorch_version("2.4.0");
  return request;
}

v1::RegisterWorkerRequest JobWorker(const std::string& id,
                                    const std::string& node, int num_ranks,
                                    const std::string& job_id) {
  v1::RegisterWorkerRequest request = TestWorker(id, node, num_ranks);
  request.set_job_id(job_id);
  return request;
}

class WorkerRegistryTest : public ::testing::Test {
 protected:
  // `job_id`: the planner's --job-id (empty: any job may register).
  std::unique_ptr<WorkerRegistry> MakeRegistry(PlannerStateStore* store,
                                               const std::string& job_id = "") {
    return std::make_unique<WorkerRegistry>(
        ModelPreset("tiny").value(),
        H200Cluster(/*num_nodes=*/2, /*gpus_per_node=*/4), absl::Seconds(60),
        clock_, store, metrics_,
        [this](const std::string& line) { log_.push_back(line); }, job_id);
  }

  // A registry over the state directory `directory`: a fresh one, or the
  // workers it holds loaded, as a restarted planner does.
  struct OnDisk {
    PlannerState state;  // what the directory held
    std::unique_ptr<PlannerStateStore> store;
    std::unique_ptr<WorkerRegistry> registry;
  };
  std::unique_ptr<OnDisk> OpenOnDisk(const std::string& directory) {
    auto on_disk = std::make_unique<OnDisk>();
    on_disk->store =
        PlannerStateStore::Open(directory, v1::JobRecord(), &on_disk->state)
            .value();
    on_disk->registry = MakeRegistry(on_disk->store.get());
    EXPECT_TRUE(on_disk->registry->Load(on_disk->state.workers).ok());
    return on_disk;
  }

  FakeClock clock_;
  NoopPlannerMetrics metrics_;
  std::vector<std::string> log_;
};

TEST_F(WorkerRegistryTest, PlacesWorkersInContiguousNodeBlocks) {
  auto registry = MakeRegistry(nullptr);
  EXPECT_EQ(registry->Register(TestWorker("a", "n0", 2))->first_rank(), 0);
  EXPECT_EQ(registry->Register(TestWorker("b", "n1", 4))->first_rank(), 4);
  v1::RegisterWorkerResponse c =
      registry->Register(TestWorker("c", "n0", 2)).value();
  EXPECT_EQ(c.first_rank(), 2);
  EXPECT_TRUE(c.world_complete());
  EXPECT_EQ(c.rendezvous_address(), "n0:29500");
  EXPECT_EQ(registry->Register(TestWorker("d", "n0", 1)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(registry->Register(TestWorker("e", "n2", 1)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(registry->Register(TestWorker("a", "n1", 2)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(registry->CheckCanServe({"a"}, 0).ok());
  EXPECT_THAT(registry->CheckReport({"a"}, 0, 3).message(),
              HasSubstr("is not one of worker 'a''s ranks 0..1"));
  EXPECT_EQ(registry->Touch({"nobody"}, false, -1).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(WorkerRegistryTest, IncompleteWorldIsNotServed) {
  auto registry = MakeRegistry(nullptr);
  ASSERT_TRUE(registry->Register(TestWorker("a", "n0", 4)).ok());
  EXPECT_THAT(registry->CheckCanServe({"a"}, 0).message(),
              HasSubstr("missing node slot 1"));
  EXPECT_FALSE(registry->List().world_complete());
}

TEST_F(WorkerRegistryTest, EachRegistrationWritesOnlyItsWorkersRecord) {
  const std::string directory = FreshTestDirectory("worker_registry_");
  {
    std::unique_ptr<OnDisk> on_disk = OpenOnDisk(directory);
    WorkerRegistry* registry = on_disk->registry.get();
    ASSERT_TRUE(registry->Register(TestWorker("a", "n0", 4)).ok());
    ASSERT_TRUE(registry->Register(TestWorker("b", "n1", 4)).ok());
    // Deleting a's record shows that registering b again (a new address)
    // rewrites b's record only.
    ASSERT_TRUE(std::filesystem::remove(directory + "/worker_000000.pb"));
    v1::RegisterWorkerRequest moved = TestWorker("b", "n1", 4);
    moved.set_address("10.0.0.9:29500");
    ASSERT_TRUE(registry->Register(moved).ok());
    EXPECT_FALSE(std::filesystem::exists(directory + "/worker_000000.pb"));
    {
      PlannerState gapped;
      // (A second store cannot open the directory while this one holds it.)
      EXPECT_FALSE(
          PlannerStateStore::Open(directory, v1::JobRecord(), &gapped).ok());
    }
    v1::RegisterWorkerRequest a = TestWorker("a", "n0", 4);
    a.set_address("10.0.0.8:29500");
    ASSERT_TRUE(registry->Register(a).ok());
  }
  std::unique_ptr<OnDisk> on_disk = OpenOnDisk(directory);
  ASSERT_EQ(on_disk->state.workers.size(), 2u);
  WorkerRegistry* registry = on_disk->registry.get();
  v1::ListWorkersResponse workers = registry->List();
  ASSERT_EQ(workers.workers_size(), 2);
  EXPECT_EQ(workers.workers(0).address(), "10.0.0.8:29500");
  EXPECT_EQ(workers.workers(1).address(), "10.0.0.9:29500");
  EXPECT_EQ(workers.workers(1).first_rank(), 4);
  EXPECT_TRUE(workers.world_complete());
}

TEST_F(WorkerRegistryTest, GapsBetweenNodeSlotsAreRefused) {
  v1::WorkerRecord second;
  *second.mutable_registration() = TestWorker("b", "n1", 4);
  second.set_node_index(1);
  second.set_first_rank(4);
  EXPECT_THAT(MakeRegistry(nullptr)->Load({second}).message(),
              HasSubstr("gap between node slots"));
}

TEST_F(WorkerRegistryTest, InconsistentRecordsAreRefused) {
  v1::WorkerRecord outside;
  *outside.mutable_registration() = TestWorker("a", "n0", 4);
  outside.set_node_index(0);
  outside.set_first_rank(2);  // 2 + 4 ranks overflow the node
  EXPECT_EQ(MakeRegistry(nullptr)->Load({outside}).code(),
            absl::StatusCode::kFailedPrecondition);
}

v1::RegisterWorkerRequest Incarnation(v1::RegisterWorkerRequest request,
                                      const std::string& incarnation,
                                      const std::string& address) {
  request.set_incarnation(incarnation);
  request.set_address(address);
  return request;
}

TEST_F(WorkerRegistryTest, ASecondCopyWithTheSameWorkerIdIsRefusedByName) {
  const std::string directory = FreshTestDirectory("second_copy_");
  {
    std::unique_ptr<OnDisk> on_disk = OpenOnDisk(directory);
    WorkerRegistry* registry = on_disk->registry.get();
    const v1::RegisterWorkerRequest first =
        Incarnation(TestWorker("a", "n0", 4), "first", "n0:29500");
    ASSERT_TRUE(registry->Register(first).ok());
    ASSERT_TRUE(registry->Register(TestWorker("b", "n1", 4)).ok());
    ASSERT_TRUE(registry->Touch({"a", "first"}, true, 0).ok());
    // A second copy of the job starts with the same worker ids: it takes
    // the id over (as a restarted worker would), and says so.
    const v1::RegisterWorkerRequest second =
        Incarnation(TestWorker("a", "n0", 4), "second", "n0:29611");
    absl::StatusOr<v1::RegisterWorkerResponse> taken =
        registry->Register(second);
    ASSERT_TRUE(taken.ok()) << taken.status();
    EXPECT_EQ(taken->rendezvous_address(), "n0:29611");
    EXPECT_THAT(log_.back(), AllOf(HasSubstr("replaces incarnation first"),
                                   HasSubstr("second copy of the job")));
    // From then on the first copy is told why, on every call, and cannot
    // take the id (or its rendezvous address) back.
    for (const absl::Status& status :
         {registry->Touch({"a", "first"}, true, 1),
          registry->CheckCanServe({"a", "first"}, 1),
          registry->CheckReport({"a", "first"}, 1, 0),
          registry->Register(first).status()}) {
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(status.message(),
                  AllOf(HasSubstr("incarnation 'first'"),
                        HasSubstr("was replaced by another process"),
                        HasSubstr("c10d store at n0:29611"),
                        HasSubstr("second copy of the job")));
    }
    EXPECT_EQ(registry->Register(second)->rendezvous_address(), "n0:29611");
    EXPECT_TRUE(registry->Touch({"a", "second"}, true, 1).ok());
    // A process that never registered under this id is refused too.
    EXPECT_THAT(registry->Touch({"a", "stranger"}, true, 1).message(),
                HasSubstr("is not the process registered"));
    // Calls without an incarnation (older clients) are not checked.
    EXPECT_TRUE(registry->Touch({"a"}, true, 1).ok());
  }
  // The refusal survives a planner restart.
  std::unique_ptr<OnDisk> on_disk = OpenOnDisk(directory);
  WorkerRegistry* registry = on_disk->registry.get();
  EXPECT_EQ(
      registry
          ->Register(Incarnation(TestWorker("a", "n0", 4), "first", "n0:29500"))
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry->List().workers(0).incarnation(), "second");
}

TEST_F(WorkerRegistryTest, OnlyTheLatestIncarnationsAreRemembered) {
  auto registry = MakeRegistry(nullptr);
  const int restarts = WorkerRegistry::kMaxSupersededIncarnations + 2;
  for (int i = 0; i <= restarts; ++i) {
    ASSERT_TRUE(registry
                    ->Register(Incarnation(TestWorker("a", "n0", 4),
                                           absl::StrCat("i", i), "n0:1"))
                    .ok());
  }
  // Every earlier incarnation is refused; the oldest are no longer named.
  EXPECT_THAT(registry->Touch({"a", "i0"}, true, 0).message(),
              HasSubstr("is not the process registered"));
  EXPECT_THAT(registry->Touch({"a", absl::StrCat("i", restarts - 1)}, true, 0)
                  .message(),
              HasSubstr("was replaced"));
}

TEST_F(WorkerRegistryTest, TheWorldIsJoinedOnceEveryWorkerIsJoining) {
  auto registry = MakeRegistry(nullptr);
  v1::RegisterWorkerRequest a = TestWorker("a", "n0", 4);
  v1::RegisterWorkerRequest b = TestWorker("b", "n1", 4);
  ASSERT_TRUE(registry->Register(a).ok());
  // b completes the world; neither is joining yet.
  v1::RegisterWorkerResponse complete = registry->Register(b).value();
  EXPECT_TRUE(complete.world_complete());
  EXPECT_FALSE(complete.world_joined());
  b.set_joining(true);
  clock_.Advance(absl::Seconds(12));
  // a registered and went silent: b's answer names it and its silence.
  v1::RegisterWorkerResponse waiting = registry->Register(b).value();
  EXPECT_FALSE(waiting.world_joined());
  EXPECT_THAT(waiting.not_joined(),
              AllOf(HasSubstr("1 of 2 workers have not joined"),
                    HasSubstr("'a' (rank 0, silent for 12s)")));
  a.set_joining(true);
  EXPECT_TRUE(registry->Register(a)->world_joined());
  EXPECT_TRUE(registry->Register(b)->world_joined());
  // A restarted worker registers without joining first: the world waits
  // for it again.
  a.set_joining(false);
  EXPECT_FALSE(registry->Register(a)->world_joined());
}

TEST_F(WorkerRegistryTest, EveryWorkerDeclaresTheSameTrainingState) {
  auto registry = MakeRegistry(nullptr);
  // Checked whether or not the workers name their backend.
  v1::RegisterWorkerRequest a = TestWorker("a", "n0", 4);
  a.set_precision("fp32");
  a.set_optimizer_sharding("none");
  ASSERT_TRUE(registry->Register(a).ok());
  v1::RegisterWorkerRequest b = a;
  b.set_worker_id("b");
  b.set_node_name("n1");
  b.set_optimizer_sharding("zero1");
  const absl::Status status = registry->Register(b).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              HasSubstr("start every worker with the same --precision and "
                        "--zero1"));
  b.set_optimizer_sharding("none");
  EXPECT_TRUE(registry->Register(b).ok());
}

TEST_F(WorkerRegistryTest, LivenessFollowsTheClock) {
  auto registry = MakeRegistry(nullptr);
  ASSERT_TRUE(registry->Register(TestWorker("a", "n0", 4)).ok());
  EXPECT_EQ(registry->List().workers(0).state(), v1::WorkerInfo::REGISTERED);
  ASSERT_TRUE(registry->Touch({"a"}, /*activity=*/true, /*step=*/5).ok());
  EXPECT_EQ(registry->List().workers(0).state(), v1::WorkerInfo::ACTIVE);
  EXPECT_EQ(registry->List().workers(0).last_step(), 5);
  clock_.Advance(absl::Seconds(61));
  EXPECT_EQ(registry->List().workers(0).state(), v1::WorkerInfo::LOST);
}

TEST_F(WorkerRegistryTest, AWallClockJumpLosesNoWorkerAndTakesNoSlot) {
  auto registry = MakeRegistry(nullptr);
  ASSERT_TRUE(registry->Register(TestWorker("a", "n0", 4)).ok());
  ASSERT_TRUE(registry->Register(TestWorker("b", "n1", 4)).ok());
  clock_.Advance(absl::Seconds(1));
  // NTP or an operator moves the wall clock by +120 s: no time has passed.
  clock_.JumpWallClock(absl::Seconds(120));
  v1::ListWorkersResponse listed = registry->List();
  ASSERT_EQ(listed.workers_size(), 2);
  EXPECT_EQ(listed.workers(0).state(), v1::WorkerInfo::REGISTERED);
  EXPECT_EQ(listed.workers(1).state(), v1::WorkerInfo::REGISTERED);
  // The time shown is the wall clock's.
  EXPECT_EQ(listed.workers(0).last_seen_unix_millis(), 0);
  // A newcomer finds no stale slot; the live workers' records stay.
  EXPECT_EQ(registry->Register(TestWorker("new", "n2", 4)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(registry->Touch({"a"}, /*activity=*/false, /*step=*/-1).ok());
  EXPECT_TRUE(registry->Touch({"b"}, /*activity=*/false, /*step=*/-1).ok());
  // A jump back does not keep a silent worker alive either.
  clock_.JumpWallClock(absl::Seconds(-600));
  clock_.Advance(absl::Seconds(61));
  EXPECT_EQ(registry->List().workers(0).state(), v1::WorkerInfo::LOST);
}

TEST_F(WorkerRegistryTest, AStaleWorkersSlotGoesToANewWorker) {
  const std::string directory = FreshTestDirectory("stale_workers_");
  {
    std::unique_ptr<OnDisk> on_disk = OpenOnDisk(directory);
    WorkerRegistry* registry = on_disk->registry.get();
    // Fake (or crashed) workers take every slot: node n0 in two halves.
    ASSERT_TRUE(registry->Register(TestWorker("fake-a", "n0", 2)).ok());
    ASSERT_TRUE(registry->Register(TestWorker("fake-b", "n0", 2)).ok());
    ASSERT_TRUE(registry->Register(TestWorker("live", "n1", 4)).ok());
    // While they are live, a newcomer is refused, saying when it may come.
    absl::StatusOr<v1::RegisterWorkerResponse> early =
        registry->Register(TestWorker("real", "n2", 4));
    EXPECT_EQ(early.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(early.status().message(), HasSubstr("silent for 1m"));
    clock_.Advance(absl::Seconds(61));
    ASSERT_TRUE(registry->Touch({"live"}, /*activity=*/true, /*step=*/0).ok());
    // n0's workers are silent beyond the liveness timeout: a new worker on
    // another node takes their slot and ranks; the live one keeps its own.
    absl::StatusOr<v1::RegisterWorkerResponse> real =
        registry->Register(TestWorker("real", "n2", 4));
    ASSERT_TRUE(real.ok()) << real.status();
    EXPECT_EQ(real->first_rank(), 0);
    EXPECT_EQ(real->node_index(), 0);
    EXPECT_TRUE(real->world_complete());
    EXPECT_EQ(registry->Touch({"fake-a"}, false, -1).code(),
              absl::StatusCode::kNotFound);
    // A live worker's slot is never taken.
    clock_.Advance(absl::Seconds(30));
    EXPECT_EQ(registry->Register(TestWorker("other", "n3", 4)).status().code(),
              absl::StatusCode::kResourceExhausted);
  }
  // The replacement survives a restart; the stale workers do not.
  std::unique_ptr<OnDisk> on_disk = OpenOnDisk(directory);
  ASSERT_EQ(on_disk->state.workers.size(), 2u);
  WorkerRegistry* registry = on_disk->registry.get();
  v1::ListWorkersResponse workers = registry->List();
  ASSERT_EQ(workers.workers_size(), 2);
  EXPECT_TRUE(workers.world_complete());
  EXPECT_EQ(registry->Register(TestWorker("real", "n2", 4))->first_rank(), 0);
}

TEST_F(WorkerRegistryTest, APlannerOfOneJobRefusesOtherJobsWorkers) {
  auto registry = MakeRegistry(nullptr, /*job_id=*/"train-7");
  absl::StatusOr<v1::RegisterWorkerResponse> other =
      registry->Register(JobWorker("a", "n0", 4, "train-8"));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other.status().message(),
              AllOf(HasSubstr("'train-8'"), HasSubstr("'train-7'"),
                    HasSubstr("--job-id")));
  absl::StatusOr<v1::RegisterWorkerResponse> anonymous =
      registry->Register(TestWorker("a", "n0", 4));
  EXPECT_EQ(anonymous.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(anonymous.status().message(),
              AllOf(HasSubstr("no job id"), HasSubstr("'train-7'")));
  EXPECT_TRUE(registry->List().workers().empty());

  ASSERT_TRUE(registry->Register(JobWorker("a", "n0", 4, "train-7")).ok());
  v1::ListWorkersResponse workers = registry->List();
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).job_id(), "train-7");
  EXPECT_THAT(log_.back(), HasSubstr("job train-7"));
}

TEST_F(WorkerRegistryTest, AWorkerIdKeepsItsJob) {
  auto registry = MakeRegistry(nullptr);  // any job may register
  ASSERT_TRUE(registry->Register(JobWorker("a", "n0", 4, "train-7")).ok());
  absl::StatusOr<v1::RegisterWorkerResponse> hijack =
      registry->Register(JobWorker("a", "n0", 4, "train-8"));
  EXPECT_EQ(hijack.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(hijack.status().message(),
              AllOf(HasSubstr("'train-7'"), HasSubstr("'train-8'")));
  EXPECT_EQ(registry->List().workers(0).job_id(), "train-7");
}

TEST_F(WorkerRegistryTest, AStaleSlotGoesOnlyToAWorkerOfTheSameJob) {
  const std::string directory = FreshTestDirectory("stale_job_");
  {
    std::unique_ptr<OnDisk> on_disk = OpenOnDisk(directory);
    WorkerRegistry* registry = on_disk->registry.get();
    ASSERT_TRUE(registry->Register(JobWorker("old", "n0", 4, "train-7")).ok());
    ASSERT_TRUE(registry->Register(JobWorker("live", "n1", 4, "train-7")).ok());
    clock_.Advance(absl::Seconds(61));
    ASSERT_TRUE(registry->Touch({"live"}, /*activity=*/true, /*step=*/0).ok());
    // Slot 0 is stale, but a worker of another job may not take it.
    absl::StatusOr<v1::RegisterWorkerResponse> intruder =
        registry->Register(JobWorker("intruder", "n2", 4, "train-8"));
    EXPECT_EQ(intruder.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(intruder.status().message(),
                AllOf(HasSubstr("'train-8'"), HasSubstr("'train-7'"),
                      HasSubstr("'old'")));
    absl::StatusOr<v1::RegisterWorkerResponse> unlabelled =
        registry->Register(TestWorker("unlabelled", "n2", 4));
    EXPECT_EQ(unlabelled.status().code(),
              absl::StatusCode::kFailedPrecondition);
    // The job's own replacement takes it.
    absl::StatusOr<v1::RegisterWorkerResponse> replacement =
        registry->Register(JobWorker("new", "n2", 4, "train-7"));
    ASSERT_TRUE(replacement.ok()) << replacement.status();
    EXPECT_EQ(replacement->first_rank(), 0);
  }
  // The job id is part of the durable record.
  std::unique_ptr<OnDisk> on_disk = OpenOnDisk(directory);
  WorkerRegistry* registry = on_disk->registry.get();
  v1::ListWorkersResponse workers = registry->List();
  ASSERT_EQ(workers.workers_size(), 2);
  EXPECT_EQ(workers.workers(0).worker_id(), "new");
  EXPECT_EQ(workers.workers(0).job_id(), "train-7");
}

TEST(WorkerRegistryHandlerTest, RegistersWorldWithStableContiguousRanks) {
  FakeClock clock;
  RecordingMetrics metrics;
  auto handler = MakeGpuRegistry(clock, &metrics);
  for (int n = 0; n < 4; ++n) {
    absl::StatusOr<v1::RegisterWorkerResponse> response =
        handler->RegisterWorker(
            Worker(absl::StrCat("w", n), absl::StrCat("node", n), 8));
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->first_rank(), 8 * n);
    EXPECT_EQ(response->num_ranks(), 8);
    EXPECT_EQ(response->node_index(), n);
    EXPECT_EQ(response->world_size(), 32);
    EXPECT_EQ(response->world_complete(), n == 3);
    EXPECT_EQ(response->waiting_for().empty(), n == 3);
    EXPECT_EQ(response->rendezvous_address(), "node0:29500");
    EXPECT_EQ(response->model().name(), "llama3-8b");
    EXPECT_EQ(response->cluster().num_nodes(), 4);
    EXPECT_EQ(response->cluster().gpus_per_node(), 8);
  }
  EXPECT_EQ(metrics.registered_workers(), 4);
  // Re-registering (e.g. after a pod restart with a new address) keeps the
  // ranks.
  v1::RegisterWorkerRequest again = Worker("w2", "node2", 8);
  again.set_address("10.0.0.9:29500");
  absl::StatusOr<v1::RegisterWorkerResponse> response =
      handler->RegisterWorker(again);
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->first_rank(), 16);
  EXPECT_EQ(response->node_index(), 2);
  EXPECT_TRUE(response->world_complete());
  // A changed node or rank count is refused, saying why.
  absl::StatusOr<v1::RegisterWorkerResponse> moved =
      handler->RegisterWorker(Worker("w2", "node5", 8));
  EXPECT_EQ(moved.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      moved.status().message(),
      AllOf(HasSubstr("'w2'"), HasSubstr("'node2'"), HasSubstr("'node5'")));
  absl::StatusOr<v1::RegisterWorkerResponse> resized =
      handler->RegisterWorker(Worker("w2", "node2", 4));
  EXPECT_EQ(resized.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(resized.status().message(), HasSubstr("with 4"));
}

TEST(WorkerRegistryHandlerTest, WorkersOfOneNodeGetConsecutiveRanks) {
  FakeClock clock;
  auto handler = MakeGpuRegistry(clock, nullptr);
  EXPECT_EQ(handler->RegisterWorker(Worker("a", "node0", 4))->first_rank(), 0);
  EXPECT_EQ(handler->RegisterWorker(Worker("b", "node1", 2))->first_rank(), 8);
  EXPECT_EQ(handler->RegisterWorker(Worker("c", "node0", 4))->first_rank(), 4);
  EXPECT_EQ(handler->RegisterWorker(Worker("d", "node1", 6))->first_rank(), 10);
  EXPECT_EQ(handler->RegisterWorker(Worker("a", "node0", 4))->first_rank(), 0);
  // node0 is full.
  absl::StatusOr<v1::RegisterWorkerResponse> full =
      handler->RegisterWorker(Worker("e", "node0", 1));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.status().message(),
              AllOf(HasSubstr("'node0'"), HasSubstr("8 of its 8"),
                    HasSubstr("'a'"), HasSubstr("'c'")));
  ASSERT_TRUE(handler->RegisterWorker(Worker("f", "node2", 8)).ok());
  ASSERT_TRUE(handler->RegisterWorker(Worker("g", "node3", 8)).ok());
  // A fifth node does not fit a 4-node cluster.
  absl::StatusOr<v1::RegisterWorkerResponse> extra =
      handler->RegisterWorker(Worker("h", "node4", 8));
  EXPECT_EQ(extra.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(extra.status().message(),
              AllOf(HasSubstr("'node4'"), HasSubstr("all 4 node slots")));
  // A worker with another backend is refused.
  v1::RegisterWorkerRequest gloo = Worker("b", "node1", 2);
  gloo.set_backend("gloo");
  EXPECT_EQ(handler->RegisterWorker(gloo).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::ListWorkersResponse workers = handler->ListWorkers({}).value();
  EXPECT_TRUE(workers.world_complete());
  ASSERT_EQ(workers.workers_size(), 6);
  std::vector<std::string> order;
  for (const v1::WorkerInfo& info : workers.workers()) {
    order.push_back(info.worker_id());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a", "c", "b", "d", "f", "g"}));
}

}  // namespace
}  // namespace dcp
