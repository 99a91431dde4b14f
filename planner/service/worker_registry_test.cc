#include "planner/service/worker_registry.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/service/test_directory.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

v1::RegisterWorkerRequest Worker(const std::string& id, const std::string& node,
                                 int num_ranks) {
  v1::RegisterWorkerRequest request;
  request.set_worker_id(id);
  request.set_node_name(node);
  request.set_num_ranks(num_ranks);
  request.set_address(absl::StrCat(node, ":29500"));
  return request;
}

class WorkerRegistryTest : public ::testing::Test {
 protected:
  std::unique_ptr<WorkerRegistry> MakeRegistry(PlannerStateStore* store) {
    return std::make_unique<WorkerRegistry>(ModelPreset("tiny").value(),
                                            H200Cluster(/*num_nodes=*/2,
                                                        /*gpus_per_node=*/4),
                                            absl::Seconds(60), clock_, store,
                                            metrics_, nullptr);
  }

  FakeClock clock_;
  NoopPlannerMetrics metrics_;
};

TEST_F(WorkerRegistryTest, PlacesWorkersInContiguousNodeBlocks) {
  auto registry = MakeRegistry(nullptr);
  EXPECT_EQ(registry->Register(Worker("a", "n0", 2))->first_rank(), 0);
  EXPECT_EQ(registry->Register(Worker("b", "n1", 4))->first_rank(), 4);
  v1::RegisterWorkerResponse c =
      registry->Register(Worker("c", "n0", 2)).value();
  EXPECT_EQ(c.first_rank(), 2);
  EXPECT_TRUE(c.world_complete());
  EXPECT_EQ(c.rendezvous_address(), "n0:29500");
  EXPECT_EQ(registry->Register(Worker("d", "n0", 1)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(registry->Register(Worker("e", "n2", 1)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(registry->Register(Worker("a", "n1", 2)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(registry->CheckCanServe("a", 0).ok());
  EXPECT_THAT(registry->CheckReport("a", 0, 3).message(),
              HasSubstr("is not one of worker 'a''s ranks 0..1"));
  EXPECT_EQ(registry->Touch("nobody", false, -1).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(WorkerRegistryTest, IncompleteWorldIsNotServed) {
  auto registry = MakeRegistry(nullptr);
  ASSERT_TRUE(registry->Register(Worker("a", "n0", 4)).ok());
  EXPECT_THAT(registry->CheckCanServe("a", 0).message(),
              HasSubstr("missing node slot 1"));
  EXPECT_FALSE(registry->List().world_complete());
}

TEST_F(WorkerRegistryTest, EachRegistrationWritesOnlyItsWorkersRecord) {
  const std::string directory = FreshTestDirectory("worker_registry_");
  v1::JobRecord job;
  {
    PlannerState state;
    auto store = PlannerStateStore::Open(directory, job, &state).value();
    auto registry = MakeRegistry(store.get());
    ASSERT_TRUE(registry->Register(Worker("a", "n0", 4)).ok());
    ASSERT_TRUE(registry->Register(Worker("b", "n1", 4)).ok());
    // Deleting a's record shows that registering b again (a new address)
    // rewrites b's record only.
    ASSERT_TRUE(std::filesystem::remove(directory + "/worker_000000.pb"));
    v1::RegisterWorkerRequest moved = Worker("b", "n1", 4);
    moved.set_address("10.0.0.9:29500");
    ASSERT_TRUE(registry->Register(moved).ok());
    EXPECT_FALSE(std::filesystem::exists(directory + "/worker_000000.pb"));
    {
      PlannerState gapped;
      // (A second store cannot open the directory while this one holds it.)
      EXPECT_FALSE(PlannerStateStore::Open(directory, job, &gapped).ok());
    }
    v1::RegisterWorkerRequest a = Worker("a", "n0", 4);
    a.set_address("10.0.0.8:29500");
    ASSERT_TRUE(registry->Register(a).ok());
  }
  PlannerState state;
  auto store = PlannerStateStore::Open(directory, job, &state).value();
  ASSERT_EQ(state.workers.size(), 2u);
  auto registry = MakeRegistry(store.get());
  ASSERT_TRUE(registry->Load(state.workers).ok());
  v1::ListWorkersResponse workers = registry->List();
  ASSERT_EQ(workers.workers_size(), 2);
  EXPECT_EQ(workers.workers(0).address(), "10.0.0.8:29500");
  EXPECT_EQ(workers.workers(1).address(), "10.0.0.9:29500");
  EXPECT_EQ(workers.workers(1).first_rank(), 4);
  EXPECT_TRUE(workers.world_complete());
}

TEST_F(WorkerRegistryTest, GapsBetweenNodeSlotsAreRefused) {
  v1::WorkerRecord second;
  *second.mutable_registration() = Worker("b", "n1", 4);
  second.set_node_index(1);
  second.set_first_rank(4);
  EXPECT_THAT(MakeRegistry(nullptr)->Load({second}).message(),
              HasSubstr("gap between node slots"));
}

TEST_F(WorkerRegistryTest, InconsistentRecordsAreRefused) {
  v1::WorkerRecord outside;
  *outside.mutable_registration() = Worker("a", "n0", 4);
  outside.set_node_index(0);
  outside.set_first_rank(2);  // 2 + 4 ranks overflow the node
  EXPECT_EQ(MakeRegistry(nullptr)->Load({outside}).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(WorkerRegistryTest, LivenessFollowsTheClock) {
  auto registry = MakeRegistry(nullptr);
  ASSERT_TRUE(registry->Register(Worker("a", "n0", 4)).ok());
  EXPECT_EQ(registry->List().workers(0).state(), v1::WorkerInfo::REGISTERED);
  ASSERT_TRUE(registry->Touch("a", /*activity=*/true, /*step=*/5).ok());
  EXPECT_EQ(registry->List().workers(0).state(), v1::WorkerInfo::ACTIVE);
  EXPECT_EQ(registry->List().workers(0).last_step(), 5);
  clock_.Advance(absl::Seconds(61));
  EXPECT_EQ(registry->List().workers(0).state(), v1::WorkerInfo::LOST);
}

}  // namespace
}  // namespace dcp
