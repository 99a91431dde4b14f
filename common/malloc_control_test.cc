#include "common/malloc_control.h"

#include <unistd.h>

#include <cstring>
#include <vector>

#include "common/process_memory.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

// 100 MiB of 1 KiB blocks, all freed but one in a hundred: the survivors
// pin the heap's top, so free() returns almost nothing to the kernel, and
// ReleaseFreedMemory must give back the free pages between them.
TEST(MallocControlTest, ReleaseFreedMemoryReturnsFreedHeapPages) {
  constexpr int kBlocks = 100 * 1024;
  std::vector<char*> blocks(kBlocks);
  for (char*& block : blocks) {
    block = new char[1024];
    std::memset(block, 1, 1024);
  }
  for (int i = 0; i < kBlocks; ++i) {
    if (i % 100 != 99) {
      delete[] blocks[i];
      blocks[i] = nullptr;
    }
  }
  const int64_t before = ReadProcessMemory(getpid()).value().resident_bytes;
  ReleaseFreedMemory();
  const int64_t after = ReadProcessMemory(getpid()).value().resident_bytes;
  EXPECT_LT(after, before - (50 << 20)) << before << " -> " << after;
  for (char* block : blocks) delete[] block;
}

}  // namespace
}  // namespace dcp
