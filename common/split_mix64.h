#ifndef DCP_COMMON_SPLIT_MIX64_H_
#define DCP_COMMON_SPLIT_MIX64_H_

// splitmix64 (Steele, Lea, Flood 2014): the one 64-bit mix that the
// synthetic datasets, the load test and the batch fingerprint derive their
// values from, so that they are the same on every platform.

#include <cstdint>
#include <initializer_list>

namespace dcp {

/// splitmix64's finaliser alone: a bijective, well-mixed map of 64-bit
/// integers. Pure.
constexpr uint64_t SplitMix64Finalize(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// splitmix64's step: add the golden-ratio increment, then finalise. Pure.
constexpr uint64_t SplitMix64(uint64_t x) {
  return SplitMix64Finalize(x + 0x9e3779b97f4a7c15ULL);
}

/// The hash of a tuple (first, rest...): SplitMix64 of `first`, then of the
/// running hash xor each next value in turn. Each value gets a round of its
/// own, so tuples do not collide by cancellation. Pure.
constexpr uint64_t SplitMix64Chain(uint64_t first,
                                   std::initializer_list<uint64_t> rest) {
  uint64_t hash = SplitMix64(first);
  for (uint64_t value : rest) hash = SplitMix64(hash ^ value);
  return hash;
}

}  // namespace dcp

#endif  // DCP_COMMON_SPLIT_MIX64_H_
