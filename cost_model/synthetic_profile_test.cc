// SyntheticProfile: deterministic per seed, every op and group size the fits
// need, and noise of the scale asked for.

#include "cost_model/synthetic_profile.h"

#include <cmath>
#include <cstddef>
#include <set>
#include <utility>
#include <vector>

#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_spec.h"
#include "cost_model/profile_sample.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

// llama3-8b on `num_nodes` nodes of eight H200s, at the default parameters.
CostModel Llama8bOn(int num_nodes) {
  const ModelSpec model = ModelPreset("llama3-8b").value();
  const ClusterSpec cluster = H200Cluster(num_nodes, /*gpus_per_node=*/8);
  return CostModel::Create(model, cluster, DefaultCostParams(model, cluster))
      .value();
}

TEST(SyntheticProfileTest, DeterministicPerSeed) {
  const CostModel truth = Llama8bOn(/*num_nodes=*/2);
  const std::vector<ProfileSample> a = SyntheticProfile(truth, 17, 0.05);
  const std::vector<ProfileSample> b = SyntheticProfile(truth, 17, 0.05);
  const std::vector<ProfileSample> c = SyntheticProfile(truth, 18, 0.05);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), c.size());
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].measured_seconds, b[i].measured_seconds);
    EXPECT_EQ(a[i].measured_bytes, b[i].measured_bytes);
    if (a[i].measured_seconds != c[i].measured_seconds ||
        a[i].measured_bytes != c[i].measured_bytes) {
      ++differ;
    }
  }
  EXPECT_EQ(differ, static_cast<int>(a.size()));
}

TEST(SyntheticProfileTest, CoversEveryOpAndGroupSize) {
  const CostModel truth = Llama8bOn(/*num_nodes=*/4);
  const std::vector<ProfileSample> samples = SyntheticProfile(truth, 1, 0);
  std::set<std::pair<int, bool>> groups;
  std::set<int> ops;
  std::set<int> checkpointed;
  for (const ProfileSample& s : samples) {
    ops.insert(static_cast<int>(s.op));
    if (s.op == ProfileSample::Op::kAllToAll) {
      groups.insert({s.group_size, s.inter_node});
    }
    if (s.op == ProfileSample::Op::kActivationMemory) {
      checkpointed.insert(s.checkpointed_layers);
    }
  }
  EXPECT_EQ(ops.size(), 11u);
  for (int n = 2; n <= 8; ++n) EXPECT_TRUE(groups.count({n, false})) << n;
  EXPECT_TRUE(groups.count({16, true}));
  EXPECT_TRUE(groups.count({32, true}));
  EXPECT_TRUE(checkpointed.count(0));
  EXPECT_TRUE(checkpointed.count(1));
  EXPECT_TRUE(checkpointed.count(truth.model().num_layers));
}

// The noise is a standard normal scaled by relative_noise: the relative
// deviations from the noise-free profile have mean ~0 and deviation ~noise.
TEST(SyntheticProfileTest, NoiseIsGaussianWithTheGivenScale) {
  const CostModel truth = Llama8bOn(/*num_nodes=*/8);
  const std::vector<ProfileSample> exact = SyntheticProfile(truth, 23, 0);
  const std::vector<ProfileSample> noisy = SyntheticProfile(truth, 23, 0.1);
  ASSERT_EQ(exact.size(), noisy.size());
  ASSERT_GT(exact.size(), 200u);
  double sum = 0;
  double sum_squares = 0;
  int within_one_sigma = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    const bool memory = exact[i].op == ProfileSample::Op::kActivationMemory;
    const double deviation =
        memory ? noisy[i].measured_bytes / exact[i].measured_bytes - 1
               : noisy[i].measured_seconds / exact[i].measured_seconds - 1;
    sum += deviation;
    sum_squares += deviation * deviation;
    if (std::abs(deviation) < 0.1) ++within_one_sigma;
  }
  const double n = static_cast<double>(exact.size());
  const double mean = sum / n;
  const double deviation = std::sqrt(sum_squares / n - mean * mean);
  EXPECT_NEAR(mean, 0, 3 * 0.1 / std::sqrt(n));
  EXPECT_NEAR(deviation, 0.1, 0.015);
  EXPECT_NEAR(within_one_sigma / n, 0.683, 0.08);
}

}  // namespace
}  // namespace dcp
