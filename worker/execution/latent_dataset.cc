#include "worker/execution/latent_dataset.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/split_mix64.h"
#include "common/status_macros.h"
#include "worker/execution/dataset.h"

namespace dcp {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Salts keep the hash streams of the different quantities apart.
constexpr uint64_t kTimestepSalt = 0x74696d6573746570ULL;
constexpr uint64_t kAmplitudeSalt = 0x616d706c69747564ULL;
constexpr uint64_t kPhaseSalt = 0x7068617365706861ULL;
constexpr uint64_t kNoiseSalt = 0x6e6f6973656e6f69ULL;

uint64_t Hash(uint64_t seed, uint64_t sample_id, uint64_t salt,
              uint64_t index) {
  return SplitMix64Chain(seed, {sample_id, salt, index});
}

// In [0, 1), from the top 53 bits.
double Unit(uint64_t hash) {
  return static_cast<double>(hash >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

absl::StatusOr<SyntheticLatentDataset> SyntheticLatentDataset::Create(
    uint64_t seed, int64_t channels) {
  if (channels < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "latent channels per patch = ", channels, " must be at least 1"));
  }
  return SyntheticLatentDataset(seed, channels);
}

absl::StatusOr<LatentSample> SyntheticLatentDataset::Sample(
    int64_t sample_id, int64_t length_tokens) const {
  if (sample_id < 0 || length_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "latent sample ", sample_id, " of ", length_tokens,
        " tokens: the id must be >= 0 and the length >= 1"));
  }
  const uint64_t id = static_cast<uint64_t>(sample_id);
  LatentSample sample;
  sample.length_tokens = length_tokens;
  sample.channels = channels_;
  sample.timestep = 0.05 + 0.9 * Unit(Hash(seed_, id, kTimestepSalt, 0));
  sample.clean.resize(length_tokens * channels_);
  sample.noise.resize(length_tokens * channels_);
  for (int64_t c = 0; c < channels_; ++c) {
    const double amplitude =
        0.5 + Unit(Hash(seed_, id, kAmplitudeSalt, static_cast<uint64_t>(c)));
    const double phase =
        Unit(Hash(seed_, id, kPhaseSalt, static_cast<uint64_t>(c)));
    for (int64_t p = 0; p < length_tokens; ++p) {
      const int64_t i = p * channels_ + c;
      sample.clean[i] = static_cast<float>(
          amplitude *
          std::sin(2 * kPi * (static_cast<double>(p) / kPeriodTokens + phase)));
      const uint64_t index = static_cast<uint64_t>(i);
      // Box-Muller: 1 - u is in (0, 1], so the log is finite.
      const double u1 = 1.0 - Unit(Hash(seed_, id, kNoiseSalt, 2 * index));
      const double u2 = Unit(Hash(seed_, id, kNoiseSalt, 2 * index + 1));
      sample.noise[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                                           std::cos(2 * kPi * u2));
    }
  }
  return sample;
}

absl::StatusOr<std::unique_ptr<SyntheticLatentDataset>> OpenLatentDataset(
    const std::string& spec, int64_t channels) {
  if (!IsSyntheticDataSpec(spec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data \"", spec,
        "\" cannot feed a diffusion model, which trains on latent patches, "
        "not token ids; use synthetic or synthetic:SEED"));
  }
  DCP_ASSIGN_OR_RETURN(const uint64_t seed, SyntheticDataSeed(spec));
  DCP_ASSIGN_OR_RETURN(SyntheticLatentDataset dataset,
                       SyntheticLatentDataset::Create(seed, channels));
  return std::make_unique<SyntheticLatentDataset>(std::move(dataset));
}

}  // namespace dcp
