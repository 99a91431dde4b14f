#include "worker/placement.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "torch/torch.h"
#include "worker/libtorch_cuda.h"

namespace dcp {
namespace {

TEST(PlacementTest, ChoosesGlooWithoutAGpuAndRefusesUnknownBackends) {
  EXPECT_EQ(*ChooseBackend("gloo"), "gloo");
  EXPECT_EQ(*ChooseBackend(""), CudaUsable() ? "nccl" : "gloo");
  if (!CudaUsable()) {
    EXPECT_EQ(ChooseBackend("nccl").status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  const absl::Status mpi = ChooseBackend("mpi").status();
  EXPECT_EQ(mpi.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mpi.message().find("\"mpi\""), absl::string_view::npos) << mpi;
}

TEST(PlacementTest, EachRankOfANodeGetsItsOwnGpu) {
  // A node of 8 ranks, each process seeing the node's 8 GPUs: rank r of the
  // world uses GPU r % 8, so no two ranks of a node share one.
  for (int rank = 0; rank < 16; ++rank) {
    EXPECT_EQ(*GpuIndexOfRank(rank, /*gpus_per_node=*/8, /*visible_gpus=*/8),
              rank % 8)
        << rank;
  }
  // More visible GPUs than ranks per node: still the rank's place.
  EXPECT_EQ(*GpuIndexOfRank(5, /*gpus_per_node=*/4, /*visible_gpus=*/8), 1);
  // CUDA_VISIBLE_DEVICES gives each process its own GPU: index 0.
  EXPECT_EQ(*GpuIndexOfRank(13, /*gpus_per_node=*/8, /*visible_gpus=*/1), 0);
}

TEST(PlacementTest, RanksThatWouldShareAGpuAreRefused) {
  const absl::StatusOr<int> shared =
      GpuIndexOfRank(3, /*gpus_per_node=*/8, /*visible_gpus=*/4);
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(shared.status().message().find("CUDA_VISIBLE_DEVICES"),
            absl::string_view::npos)
      << shared.status();
  EXPECT_EQ(GpuIndexOfRank(0, 8, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GpuIndexOfRank(-1, 8, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlacementTest, GlooRanksRunOnTheCpu) {
  EXPECT_EQ(*DeviceOfRank("gloo", /*rank=*/3, /*gpus_per_node=*/2),
            torch::Device(torch::kCPU));
  EXPECT_TRUE(UseDevice(torch::kCPU).ok());
}

TEST(PlacementTest, NcclRanksShareTheGpusOfTheirNode) {
  if (!CudaUsable()) GTEST_SKIP() << "no GPU";
  const int gpus = static_cast<int>(torch::cuda::device_count());
  EXPECT_EQ(DeviceOfRank("nccl", /*rank=*/1, /*gpus_per_node=*/gpus)->index(),
            1 % gpus);
  EXPECT_EQ(
      DeviceOfRank("nccl", /*rank=*/gpus, /*gpus_per_node=*/gpus)->index(), 0);
}

}  // namespace
}  // namespace dcp
