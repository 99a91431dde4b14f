// Latent-patch datasets for diffusion models (the video DiT): what a planned
// sample of a DiT job is made of.
//
// A video DiT trains on the latents of a video autoencoder cut into patches:
// a sample of L tokens is L vectors of `channels` numbers (latent channels x
// the patch's frames, rows and columns). A diffusion step also needs the
// sample's noise and its timestep. Here all three are pure functions of
// (seed, sample id): every rank, and every plan, sees the same sample.

#ifndef DCP_WORKER_EXECUTION_LATENT_DATASET_H_
#define DCP_WORKER_EXECUTION_LATENT_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dcp {

/// One sample of a diffusion model: its clean latent patches, the noise it
/// is mixed with and the timestep of the mix. Plain value.
struct LatentSample {
  /// Tokens (patches) L, and numbers per patch C.
  int64_t length_tokens = 0;
  int64_t channels = 0;
  /// Row-major [L, C]: the clean latents x0 and standard normal noise eps.
  std::vector<float> clean;
  std::vector<float> noise;
  /// Diffusion time t in (0, 1): the model sees (1 - t) x0 + t eps
  /// (rectified flow) and predicts the velocity eps - x0.
  double timestep = 0;
};

/// Deterministic synthetic latents. With h = a splitmix64 hash of (seed,
/// sample id, index):
///  * clean[p, c] = a_c sin(2 pi (p / kPeriodTokens + phi_c)), amplitude a_c
///    in [0.5, 1.5) and phase phi_c in [0, 1) per (sample, channel): smooth
///    along the sequence, so a model that attends to its neighbours can
///    tell the signal from the noise;
///  * noise[p, c] standard normal (Box-Muller of two hashes);
///  * timestep uniform in [0.05, 0.95).
/// A sample asked for with a shorter length is a prefix of the longer one
/// (its timestep and per-channel pattern do not depend on the length).
///
/// Thread model: immutable; safe for concurrent use.
class SyntheticLatentDataset {
 public:
  static constexpr double kPeriodTokens = 16.0;

  /// INVALID_ARGUMENT unless channels >= 1.
  static absl::StatusOr<SyntheticLatentDataset> Create(uint64_t seed,
                                                       int64_t channels);

  /// INVALID_ARGUMENT for a negative id or a length < 1.
  absl::StatusOr<LatentSample> Sample(int64_t sample_id,
                                      int64_t length_tokens) const;

  uint64_t seed() const { return seed_; }
  int64_t channels() const { return channels_; }

 private:
  SyntheticLatentDataset(uint64_t seed, int64_t channels)
      : seed_(seed), channels_(channels) {}

  uint64_t seed_;
  // >= 1.
  int64_t channels_;
};

/// The latent dataset named by `spec` ("synthetic" or "synthetic:SEED", the
/// same specs and seeds as OpenDataset's synthetic tokens) with `channels`
/// numbers per patch. INVALID_ARGUMENT for any other spec (token files hold
/// token ids, which a diffusion model does not read).
absl::StatusOr<std::unique_ptr<SyntheticLatentDataset>> OpenLatentDataset(
    const std::string& spec, int64_t channels);

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_LATENT_DATASET_H_
