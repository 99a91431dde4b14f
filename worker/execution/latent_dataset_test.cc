#include "worker/execution/latent_dataset.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

TEST(SyntheticLatentDatasetTest, SamplesAreDeterministicPrefixesPerId) {
  const SyntheticLatentDataset a = *SyntheticLatentDataset::Create(7, 4);
  const SyntheticLatentDataset b = *SyntheticLatentDataset::Create(7, 4);
  const LatentSample long_sample = *a.Sample(3, 40);
  const LatentSample again = *b.Sample(3, 40);
  const LatentSample prefix = *a.Sample(3, 10);
  EXPECT_EQ(long_sample.clean, again.clean);
  EXPECT_EQ(long_sample.noise, again.noise);
  EXPECT_EQ(long_sample.timestep, again.timestep);
  ASSERT_EQ(prefix.clean.size(), 40u);
  EXPECT_TRUE(std::equal(prefix.clean.begin(), prefix.clean.end(),
                         long_sample.clean.begin()));
  EXPECT_TRUE(std::equal(prefix.noise.begin(), prefix.noise.end(),
                         long_sample.noise.begin()));
  EXPECT_EQ(prefix.timestep, long_sample.timestep);
  // Other ids and seeds give other samples.
  EXPECT_NE(a.Sample(4, 40)->noise, long_sample.noise);
  EXPECT_NE(SyntheticLatentDataset::Create(8, 4)->Sample(3, 40)->noise,
            long_sample.noise);
}

TEST(SyntheticLatentDatasetTest, NoiseIsStandardNormalAndTimestepsInRange) {
  const SyntheticLatentDataset dataset = *SyntheticLatentDataset::Create(1, 8);
  double sum = 0, sum_squares = 0, count = 0;
  for (int64_t id = 0; id < 50; ++id) {
    const LatentSample sample = *dataset.Sample(id, 64);
    EXPECT_GE(sample.timestep, 0.05);
    EXPECT_LT(sample.timestep, 0.95);
    EXPECT_EQ(sample.length_tokens, 64);
    EXPECT_EQ(sample.channels, 8);
    for (float x : sample.noise) {
      sum += x;
      sum_squares += x * x;
      ++count;
    }
    for (float x : sample.clean) EXPECT_LE(std::abs(x), 1.5f);
  }
  EXPECT_NEAR(sum / count, 0.0, 0.03);
  EXPECT_NEAR(sum_squares / count, 1.0, 0.05);
}

TEST(SyntheticLatentDatasetTest, BadArgumentsAreNamed) {
  EXPECT_EQ(SyntheticLatentDataset::Create(1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  const SyntheticLatentDataset dataset = *SyntheticLatentDataset::Create(1, 2);
  EXPECT_EQ(dataset.Sample(-1, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dataset.Sample(1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OpenLatentDatasetTest, AcceptsSyntheticSpecsOnly) {
  EXPECT_EQ((*OpenLatentDataset("synthetic", 4))->seed(), 0u);
  EXPECT_EQ((*OpenLatentDataset("synthetic:9", 4))->seed(), 9u);
  EXPECT_EQ((*OpenLatentDataset("synthetic:9", 4))->channels(), 4);
  EXPECT_THAT(OpenLatentDataset("synthetic:x", 4).status().message(),
              HasSubstr("non-negative integer"));
  EXPECT_THAT(OpenLatentDataset("tokens:/data/p", 4).status().message(),
              HasSubstr("latent patches"));
}

}  // namespace
}  // namespace dcp
