// The fingerprint of a global batch: what the planner records for each step
// and what GetPlanRequest.batch_fingerprint carries, so that a client can
// name a step's batch without sending it. Pure; thread-safe.

#ifndef DCP_PLANNER_SERVICE_BATCH_FINGERPRINT_H_
#define DCP_PLANNER_SERVICE_BATCH_FINGERPRINT_H_

#include <cstdint>

#include "absl/types/span.h"
#include "common/split_mix64.h"
#include "planner/workload/workload.h"

namespace dcp {

/// The algorithm of BatchFingerprint. A state directory records the version
/// its fingerprints were made with; change it whenever the values change.
///   1: byte-wise FNV-1a (before GetPlan by step).
///   2: the word-wise hash described at BatchFingerprinter.
inline constexpr int kBatchFingerprintVersion = 2;

/// Computes a batch fingerprint sample by sample, for callers that hold
/// samples in another form (e.g. a dcp.v1.GlobalBatch). Not thread-safe.
///
/// The value depends only on the number of samples and each sample's
/// (id, length_tokens) in order, and is the same on every machine, compiler
/// and process. Algorithm (all arithmetic modulo 2^64, rotl = rotate left):
///
///   mix(x)   = splitmix64's finalizer:
///              x ^= x >> 30; x *= 0xbf58476d1ce4e5b9;
///              x ^= x >> 27; x *= 0x94d049bb133111eb; x ^= x >> 31
///   absorb(h, w) = (rotl(h ^ mix(w), 27) * 0x9e3779b97f4a7c15)
///                  + 0x632be59bd9b4e019
///   h0 = mix(0x6463702d62617463 ^ num_samples)
///   h  = absorb(absorb(h, id_i), length_tokens_i) for each sample i in order
///   fingerprint = mix(h), or 1 if that is 0
///
/// ids and lengths enter as their 64-bit two's-complement words. 0 is never
/// returned: GetPlanRequest uses 0 for "no fingerprint given".
class BatchFingerprinter {
 public:
  explicit BatchFingerprinter(uint64_t num_samples)
      : hash_(Mix(kSeed ^ num_samples)) {}

  void Add(int64_t id, int64_t length_tokens) {
    Absorb(static_cast<uint64_t>(id));
    Absorb(static_cast<uint64_t>(length_tokens));
  }

  uint64_t Finish() const {
    const uint64_t value = Mix(hash_);
    return value == 0 ? 1 : value;
  }

 private:
  static constexpr uint64_t kSeed = 0x6463702d62617463ull;  // "dcp-batc"

  static uint64_t Mix(uint64_t x) { return SplitMix64Finalize(x); }

  void Absorb(uint64_t word) {
    const uint64_t x = hash_ ^ Mix(word);
    hash_ =
        ((x << 27) | (x >> 37)) * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  }

  uint64_t hash_;
};

/// The fingerprint of `samples` in order (see BatchFingerprinter). A worker
/// that builds a step's batch computes the same value as the planner.
uint64_t BatchFingerprint(absl::Span<const Sample> samples);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_BATCH_FINGERPRINT_H_
