#include "worker/communication/collective_wait.h"

#include <chrono>

#include "gtest/gtest.h"

namespace dcp {
namespace {

TEST(CollectiveWaitTest, GlooWaitsOnTheCpuUpToTheCallTimeout) {
  EXPECT_EQ(WorkWaitTimeout("gloo", std::chrono::milliseconds(20000)),
            std::chrono::milliseconds(20000));
}

// A timeout would make ProcessGroupNCCL poll completion from the CPU every
// millisecond; without one the wait only orders the stream.
TEST(CollectiveWaitTest, NcclWaitIsNeverGivenATimeout) {
  EXPECT_EQ(WorkWaitTimeout("nccl", std::chrono::milliseconds(20000)),
            kWaitWithoutTimeout);
  EXPECT_EQ(kWaitWithoutTimeout.count(), 0);
}

}  // namespace
}  // namespace dcp
