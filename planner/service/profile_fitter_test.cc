#include "planner/service/profile_fitter.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/client/proto_convert.h"

namespace dcp {
namespace {

// Counts fits. Thread-safe.
class FitCounter final : public NoopPlannerMetrics {
 public:
  void ProfilesFitted(int workers, int64_t) override {
    fits.fetch_add(1);
    last_workers.store(workers);
  }
  std::atomic<int> fits{0};
  std::atomic<int> last_workers{0};
};

class ProfileFitterTest : public ::testing::Test {
 protected:
  ProfileFitterTest()
      : model_(ModelPreset("tiny").value()),
        cluster_(H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/1)),
        registry_(model_, cluster_,
                  std::make_shared<const CostModel>(
                      CostModel::CreateDefault(model_, cluster_).value()),
                  /*store=*/nullptr),
        fitter_(model_, cluster_, registry_, /*store=*/nullptr, metrics_,
                nullptr) {}

  v1::SubmitProfileRequest Profile(const std::string& worker, uint64_t seed) {
    CostParams truth = DefaultCostParams(model_, cluster_);
    truth.compute.gemm_flops_per_second *= 0.6;
    const CostModel model = CostModel::Create(model_, cluster_, truth).value();
    v1::SubmitProfileRequest request;
    request.set_worker_id(worker);
    for (const ProfileSample& sample :
         SyntheticProfile(model, seed, /*relative_noise=*/0.01)) {
      *request.add_samples() = ProfileSampleToProto(sample);
    }
    return request;
  }

  const ModelSpec model_;
  const ClusterSpec cluster_;
  FitCounter metrics_;
  CostParamsRegistry registry_;
  ProfileFitter fitter_;
};

TEST_F(ProfileFitterTest, AnUnchangedProfileNeedsNoFit) {
  ASSERT_TRUE(fitter_.Submit(Profile("w0", 1)).ok());
  EXPECT_EQ(metrics_.fits.load(), 1);
  EXPECT_EQ(registry_.Snapshot()->current->version, 1);
  ASSERT_TRUE(fitter_.Submit(Profile("w0", 1)).ok());
  EXPECT_EQ(metrics_.fits.load(), 1);
  ASSERT_TRUE(fitter_.Submit(Profile("w1", 2)).ok());
  EXPECT_EQ(metrics_.fits.load(), 2);
  EXPECT_EQ(metrics_.last_workers.load(), 2);
}

TEST_F(ProfileFitterTest, ConcurrentSubmissionsShareFits) {
  std::vector<v1::SubmitProfileRequest> profiles;
  for (int i = 0; i < 8; ++i) {
    profiles.push_back(Profile("w" + std::to_string(i), i + 1));
  }
  std::vector<std::thread> threads;
  for (const v1::SubmitProfileRequest& profile : profiles) {
    threads.emplace_back([&] { EXPECT_TRUE(fitter_.Submit(profile).ok()); });
  }
  for (std::thread& thread : threads) thread.join();
  // Every submission is answered by a fit covering it; the last fit covers
  // all eight profiles, and no submission fits alone after it.
  EXPECT_GE(metrics_.fits.load(), 1);
  EXPECT_LE(metrics_.fits.load(), 8);
  EXPECT_EQ(metrics_.last_workers.load(), 8);
}

TEST_F(ProfileFitterTest, BadSamplesAreNamedBeforeRecording) {
  v1::SubmitProfileRequest request = Profile("w0", 1);
  request.mutable_samples(3)->set_measured_seconds(-1);
  EXPECT_THAT(fitter_.CheckSamples(request).message(),
              ::testing::AllOf(::testing::HasSubstr("sample 3"),
                               ::testing::HasSubstr("measured_seconds")));
}

}  // namespace
}  // namespace dcp
