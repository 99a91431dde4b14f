#include "worker/placement.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "torch/torch.h"

namespace dcp {
namespace {

bool CudaVisible() {
#if DCP_LIBTORCH_HAS_CUDA
  return torch::cuda::is_available();
#else
  return false;
#endif
}

TEST(PlacementTest, ChoosesGlooWithoutAGpuAndRefusesUnknownBackends) {
  EXPECT_EQ(*ChooseBackend("gloo"), "gloo");
  EXPECT_EQ(*ChooseBackend(""), CudaVisible() ? "nccl" : "gloo");
  if (!CudaVisible()) {
    EXPECT_EQ(ChooseBackend("nccl").status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  const absl::Status mpi = ChooseBackend("mpi").status();
  EXPECT_EQ(mpi.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mpi.message().find("\"mpi\""), absl::string_view::npos) << mpi;
}

TEST(PlacementTest, GlooRanksRunOnTheCpuWhoseAllocatorHasNoPeak) {
  EXPECT_EQ(DeviceOfRank("gloo", /*rank=*/3, /*gpus_per_node=*/2),
            torch::Device(torch::kCPU));
  ResetPeakMemory(torch::kCPU);
  torch::Tensor large = torch::ones({1 << 16});
  EXPECT_EQ(PeakMemoryBytes(torch::kCPU), 0);
}

TEST(PlacementTest, NcclRanksShareTheGpusOfTheirNode) {
  if (!CudaVisible()) GTEST_SKIP() << "no GPU";
  const int gpus = static_cast<int>(torch::cuda::device_count());
  EXPECT_EQ(DeviceOfRank("nccl", /*rank=*/1, /*gpus_per_node=*/gpus).index(),
            1 % gpus);
  EXPECT_EQ(DeviceOfRank("nccl", /*rank=*/gpus, /*gpus_per_node=*/gpus).index(),
            0);
}

}  // namespace
}  // namespace dcp
