#include "common/process_memory.h"

#include <unistd.h>

#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

// Touching 64 MiB more raises this process's resident high-water mark by
// about that much: the reading is the kernel's, not an estimate.
TEST(ProcessMemoryTest, PeakFollowsTouchedMemory) {
  const ProcessMemory before = ReadProcessMemory(getpid()).value();
  EXPECT_GT(before.resident_bytes, 0);
  EXPECT_GE(before.peak_resident_bytes, before.resident_bytes);

  constexpr size_t kBytes = size_t{64} << 20;
  auto block = std::make_unique<char[]>(kBytes);
  std::memset(block.get(), 1, kBytes);
  const ProcessMemory after = ReadProcessMemory(getpid()).value();
  EXPECT_GE(after.resident_bytes, before.resident_bytes + (60 << 20));
  EXPECT_GE(after.peak_resident_bytes, before.resident_bytes + (60 << 20));
  EXPECT_EQ(block[kBytes - 1], 1);
}

TEST(ProcessMemoryTest, AGoneProcessIsNotFound) {
  EXPECT_EQ(ReadProcessMemory(0x3fffffff).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dcp
