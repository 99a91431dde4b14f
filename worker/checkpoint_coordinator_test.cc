// CheckpointCoordinator on one rank (fake communicator) and against a
// scripted second rank that found another checkpoint.

#include "worker/checkpoint_coordinator.h"

#include <cerrno>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/fake_clock.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/torch.h"
#include "worker/communication/fake_communicator.h"
#include "worker/execution/checkpoint.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  return EmptyTestDirectory("checkpoint_coordinator_" + name);
}

/// A model and its optimizer, and a coordinator for them on `communicator`.
struct Rank {
  Rank(Communicator& communicator, CheckpointCoordinatorOptions options)
      : consensus(communicator, torch::kCPU),
        model(torch::nn::LinearOptions(3, 2)),
        optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3)),
        coordinator(
            std::move(options), consensus, *model, optimizer, clock,
            [this](const std::string& line) { logged.push_back(line); }) {}

  FakeClock clock;
  std::vector<std::string> logged;
  WorldConsensus consensus;
  torch::nn::Linear model;
  torch::optim::AdamW optimizer;
  CheckpointCoordinator coordinator;
};

CheckpointCoordinatorOptions InDir(const std::string& dir, int64_t every) {
  CheckpointCoordinatorOptions options;
  options.dir = dir;
  options.every = every;
  options.model_name = "linear";
  return options;
}

TEST(CheckpointCoordinatorTest, DueWhenStoppingAtTheEndAndEveryKSteps) {
  FakeCommunicator communicator;
  Rank every_three(communicator, InDir(TestDir("due"), /*every=*/3));
  const CheckpointCoordinator& due = every_three.coordinator;
  EXPECT_FALSE(due.Due(/*next_step=*/1, /*steps=*/10, /*stopping=*/false));
  EXPECT_TRUE(due.Due(/*next_step=*/3, /*steps=*/10, /*stopping=*/false));
  EXPECT_TRUE(due.Due(/*next_step=*/4, /*steps=*/10, /*stopping=*/true));
  EXPECT_TRUE(due.Due(/*next_step=*/10, /*steps=*/10, /*stopping=*/false));
  Rank only_at_the_end(communicator, InDir(TestDir("due_end"), /*every=*/0));
  EXPECT_FALSE(only_at_the_end.coordinator.Due(3, 10, false));
  Rank without_dir(communicator, InDir("", /*every=*/1));
  EXPECT_FALSE(without_dir.coordinator.Due(10, 10, true));
}

TEST(CheckpointCoordinatorTest, AResumedRankHasTheWrittenStepAndWeights) {
  const std::string dir = TestDir("round_trip");
  FakeCommunicator communicator;
  Rank writer(communicator, InDir(dir, 0));
  {
    Rank fresh(communicator, InDir(dir, 0));
    absl::StatusOr<std::optional<int64_t>> none = fresh.coordinator.Resume();
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_FALSE(none->has_value());
  }
  ASSERT_TRUE(writer.coordinator.WriteOnEveryRank(/*next_step=*/5).ok());
  EXPECT_THAT(writer.logged,
              Contains(AllOf(HasSubstr("checkpoint (next step 5) written to"),
                             HasSubstr(writer.coordinator.path()))));
  // Written, then agreed on: one all-reduce.
  EXPECT_EQ(communicator.world().all_reduce_calls, 2);

  Rank reader(communicator, InDir(dir, 0));
  absl::StatusOr<std::optional<int64_t>> next = reader.coordinator.Resume();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, std::optional<int64_t>(5));
  EXPECT_TRUE(torch::equal(reader.model->weight, writer.model->weight));
}

TEST(CheckpointCoordinatorTest, AFailedWriteIsRankZerosError) {
  const std::string dir = TestDir("failed_write");
  WriteTestFile(dir + "/a-file", "not a directory");
  FakeCommunicator communicator;
  Rank rank(communicator, InDir(dir + "/a-file/checkpoints", 0));
  const absl::Status status = rank.coordinator.WriteOnEveryRank(2);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(),
              HasSubstr("checkpoint write failed on rank 0: cannot create the "
                        "checkpoint directory"));
}

TEST(CheckpointCoordinatorTest, AFullDiskIsRankZerosErrorAndKeepsTheOldOne) {
  const std::string dir = TestDir("full_disk");
  FakeCommunicator communicator;
  Rank writer(communicator, InDir(dir, 0));
  ASSERT_TRUE(writer.coordinator.WriteOnEveryRank(/*next_step=*/2).ok());
  CheckpointCoordinatorOptions full = InDir(dir, 0);
  full.write_file = [](const std::string& path, absl::string_view) {
    return FileSystemError("writing", path + "~tmp.1.0", ENOSPC);
  };
  Rank rank(communicator, full);
  const absl::Status status = rank.coordinator.WriteOnEveryRank(4);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("checkpoint write failed on rank 0: writing the "
                              "checkpoint"),
                    HasSubstr(absl::StrCat(" in ", dir, ": ")),
                    HasSubstr("No space left on device")));
  Rank reader(communicator, InDir(dir, 0));
  absl::StatusOr<std::optional<int64_t>> next = reader.coordinator.Resume();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, std::optional<int64_t>(2));
}

/// Rank `rank` (0 or 1) of a world of two whose all-reduces add what the
/// other rank offers: `other` in the last slot of a gather, `other` to a
/// sum.
class TwoRankWorld final : public Communicator {
 public:
  explicit TwoRankWorld(double other, int rank = 0)
      : rank_(rank), group_(other) {}
  int rank() const override { return rank_; }
  int world_size() const override { return 2; }
  CommGroup& World() override { return group_; }
  absl::StatusOr<CommGroup*> Group(const std::vector<int>&) override {
    return &group_;
  }
  int groups_created() const override { return 1; }

 private:
  class ScriptedGroup final : public FakeCommGroup {
   public:
    explicit ScriptedGroup(double other) : FakeCommGroup(0), other_(other) {}
    absl::Status AllReduceSum(torch::Tensor& tensor, absl::Duration) override {
      tensor[tensor.numel() - 1] += other_;
      return absl::OkStatus();
    }

   private:
    double other_;
  };
  int rank_;
  ScriptedGroup group_;
};

TEST(CheckpointCoordinatorTest, RanksThatFoundDifferentCheckpointsRefuse) {
  const std::string dir = TestDir("disagree");
  TwoRankWorld world(/*other=*/-1);  // Rank 1 found none.
  Rank rank(world, InDir(dir, 0));
  ASSERT_TRUE(
      WriteCheckpoint(dir, 4, "linear", *rank.model, rank.optimizer).ok());
  const absl::Status status = rank.coordinator.Resume().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("rank 0 found next step 4"),
                    HasSubstr("rank 1 found none"),
                    HasSubstr("one directory shared by every rank")));
}

TEST(CheckpointCoordinatorTest, OtherRanksLearnWhyRankZeroFailed) {
  // Rank 1 of a world of two; rank 0 failed with RESOURCE_EXHAUSTED (its
  // disk is full) and adds that code to the sum.
  const std::string dir = TestDir("other_failed");
  TwoRankWorld world(
      /*other=*/static_cast<int>(absl::StatusCode::kResourceExhausted),
      /*rank=*/1);
  Rank rank(world, InDir(dir, 0));
  const absl::Status status = rank.coordinator.WriteOnEveryRank(3);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat("checkpoint write failed on rank 0: No "
                                     "space left on device (or over quota) "
                                     "in ",
                                     dir, " (before step 3")));
  // Rank 1 wrote nothing.
  EXPECT_FALSE(std::filesystem::exists(rank.coordinator.path()));
}

}  // namespace
}  // namespace dcp
