// WorldConsensus in a world of one (fake communicators) and over 4 Gloo
// ranks (child processes, see multiprocess_test_util.h).

#include "worker/world_consensus.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/torch.h"
#include "worker/communication/c10d_test_world.h"
#include "worker/communication/fake_communicator.h"
#include "worker/communication/multiprocess_test_util.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(30);

TEST(WorldConsensusTest, AWorldOfOneAgreesWithItself) {
  FakeCommunicator communicator;
  WorldConsensus consensus(communicator, torch::kCPU);
  EXPECT_EQ(*consensus.Sum(2.5, "on a sum", kTimeout), 2.5);
  EXPECT_TRUE(*consensus.Any(true, "whether to stop", kTimeout));
  EXPECT_FALSE(*consensus.Any(false, "whether to stop", kTimeout));
  EXPECT_THAT(*consensus.Gather(7, "on the checkpoint step", kTimeout),
              ElementsAre(7));
  EXPECT_EQ(communicator.world().all_reduce_calls, 4);
}

/// A group of one whose all-reduces time out.
class TimingOutGroup final : public FakeCommGroup {
 public:
  TimingOutGroup() : FakeCommGroup(/*global_rank=*/0) {}
  absl::Status AllReduceSum(torch::Tensor&, absl::Duration timeout) override {
    return absl::DeadlineExceededError(absl::StrCat(
        "AllReduceSum timed out after ", absl::FormatDuration(timeout)));
  }
};

TEST(WorldConsensusTest, AFailedAgreementSaysWhatWasBeingAgreed) {
  OneGroupCommunicator<TimingOutGroup> communicator;
  WorldConsensus consensus(communicator, torch::kCPU);
  const absl::Status status =
      consensus.Any(true, "whether to stop", absl::Seconds(3)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("agreeing whether to stop"),
                                      HasSubstr("timed out after 3s")));
  EXPECT_EQ(consensus.Gather(1, "on the step", kTimeout).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

absl::Status Expect(bool condition, const std::string& what) {
  if (condition) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("check failed: ", what));
}

// Each rank offers its rank: the sum is 0+1+2+3, only rank 2 wants to stop,
// and the gather puts every value at its rank.
DCP_RANK_MAIN(AgreeOverFour) {
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      ::dcp::testing::JoinC10dTestWorld(context, "world_consensus", kTimeout);
  if (!communicator.ok()) return communicator.status();
  WorldConsensus consensus(**communicator, torch::kCPU);
  const double rank = context.rank;
  absl::StatusOr<double> sum = consensus.Sum(rank, "on a sum", kTimeout);
  if (!sum.ok()) return sum.status();
  if (absl::Status status = Expect(*sum == 6, absl::StrCat("sum ", *sum));
      !status.ok()) {
    return status;
  }
  absl::StatusOr<bool> any =
      consensus.Any(context.rank == 2, "whether to stop", kTimeout);
  if (!any.ok()) return any.status();
  if (absl::Status status = Expect(*any, "rank 2 asked to stop");
      !status.ok()) {
    return status;
  }
  absl::StatusOr<std::vector<double>> all =
      consensus.Gather(10 * rank, "on the step", kTimeout);
  if (!all.ok()) return all.status();
  return Expect(*all == std::vector<double>{0, 10, 20, 30},
                absl::StrCat("gather ", absl::StrJoin(*all, ",")));
}

TEST(WorldConsensusTest, FourGlooRanksAgree) {
  EXPECT_TRUE(::dcp::testing::EveryRankSucceeded(
      /*world_size=*/4, absl::Seconds(90), "AgreeOverFour"));
}

}  // namespace
}  // namespace dcp
