#ifndef DCP_COMMON_SPLIT_MIX64_H_
#define DCP_COMMON_SPLIT_MIX64_H_

// The splitmix64 output function (Steele, Lea, Flood 2014): the one mix the
// synthetic datasets and the load test derive their per-(seed, ...) streams
// from, so that they are the same on every platform.

#include <cstdint>

namespace dcp {

/// A bijective, well-mixed map of 64-bit integers (splitmix64's step: add
/// the golden-ratio increment, then its finaliser). Pure.
constexpr uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace dcp

#endif  // DCP_COMMON_SPLIT_MIX64_H_
