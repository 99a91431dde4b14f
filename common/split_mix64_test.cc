#include "common/split_mix64.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace dcp {
namespace {

TEST(SplitMix64Test, MatchesTheReferenceStream) {
  // splitmix64 seeded with 0 first outputs 0xe220a8397b1dcdaf, then
  // 0x6e789e6aa1b965f4 (its state advances by the increment each call).
  EXPECT_EQ(SplitMix64(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(SplitMix64(0x9e3779b97f4a7c15ULL), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(SplitMix64Finalize(0x9e3779b97f4a7c15ULL), SplitMix64(0));
}

TEST(SplitMix64Test, ChainGivesEachValueItsOwnRound) {
  const uint64_t seed = 42, a = 7, b = 11;
  EXPECT_EQ(SplitMix64Chain(seed, {}), SplitMix64(seed));
  EXPECT_EQ(SplitMix64Chain(seed, {a, b}),
            SplitMix64(SplitMix64(SplitMix64(seed) ^ a) ^ b));
  // Swapping two values changes the hash: no cancellation.
  EXPECT_NE(SplitMix64Chain(seed, {a, b}), SplitMix64Chain(seed, {b, a}));
}

}  // namespace
}  // namespace dcp
