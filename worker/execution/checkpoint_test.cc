// WriteCheckpoint / ReadCheckpoint on their own: a round trip into a fresh
// model and optimizer, and each way a checkpoint can be refused.

#include "worker/execution/checkpoint.h"

#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

// A fresh directory under TEST_TMPDIR for each test.
std::string TestDirectory() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string directory = absl::StrCat(
      tmp != nullptr ? tmp : "/tmp", "/checkpoint_",
      ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(directory);
  return directory;
}

struct Trained {
  torch::nn::Linear model{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer;
};

/// A small model after `steps` AdamW steps (so the optimizer has state).
Trained MakeTrained(int seed, int steps) {
  torch::manual_seed(seed);
  Trained trained;
  trained.model = torch::nn::Linear(4, 3);
  trained.optimizer = std::make_unique<torch::optim::AdamW>(
      trained.model->parameters(), torch::optim::AdamWOptions(1e-2));
  for (int i = 0; i < steps; ++i) {
    trained.optimizer->zero_grad();
    trained.model->forward(torch::ones({2, 4})).sum().backward();
    trained.optimizer->step();
  }
  return trained;
}

TEST(CheckpointTest, RoundTripsIntoTheSameParameterTensors) {
  const std::string dir = TestDirectory();
  Trained saved = MakeTrained(/*seed=*/1, /*steps=*/3);
  ASSERT_TRUE(WriteCheckpoint(dir, /*next_step=*/7, "tiny", *saved.model,
                              *saved.optimizer)
                  .ok());
  EXPECT_FALSE(std::filesystem::exists(CheckpointPath(dir) + ".tmp"));

  Trained loaded = MakeTrained(/*seed=*/2, /*steps=*/1);
  const torch::Tensor weight = loaded.model->weight;  // same TensorImpl
  absl::StatusOr<std::optional<int64_t>> next =
      ReadCheckpoint(dir, "tiny", *loaded.model, *loaded.optimizer);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ(**next, 7);
  // Loaded in place, on the model's device: the optimizer still updates the
  // model's own parameters.
  EXPECT_TRUE(weight.is_same(loaded.model->weight));
  EXPECT_EQ(loaded.model->weight.device(), saved.model->weight.device());
  EXPECT_TRUE(torch::equal(loaded.model->weight, saved.model->weight));
  EXPECT_TRUE(torch::equal(loaded.model->bias, saved.model->bias));
  // One more identical step from both gives identical parameters (the
  // AdamW moments and step count came along).
  for (Trained* trained : {&saved, &loaded}) {
    trained->optimizer->zero_grad();
    trained->model->forward(torch::ones({2, 4})).sum().backward();
    trained->optimizer->step();
  }
  EXPECT_TRUE(torch::equal(loaded.model->weight, saved.model->weight));
}

TEST(CheckpointTest, NoFileIsNoCheckpoint) {
  Trained trained = MakeTrained(1, 0);
  absl::StatusOr<std::optional<int64_t>> next = ReadCheckpoint(
      TestDirectory(), "tiny", *trained.model, *trained.optimizer);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_FALSE(next->has_value());
}

TEST(CheckpointTest, RefusesAnotherModelOrAGarbledFile) {
  const std::string dir = TestDirectory();
  Trained trained = MakeTrained(1, 1);
  ASSERT_TRUE(
      WriteCheckpoint(dir, 3, "tiny", *trained.model, *trained.optimizer).ok());
  absl::StatusOr<std::optional<int64_t>> other =
      ReadCheckpoint(dir, "llama3-8b", *trained.model, *trained.optimizer);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(),
              HasSubstr("was written for model 'tiny' but this job trains "
                        "'llama3-8b'"));

  { std::ofstream(CheckpointPath(dir), std::ios::trunc) << "not a zip"; }
  absl::StatusOr<std::optional<int64_t>> garbled =
      ReadCheckpoint(dir, "tiny", *trained.model, *trained.optimizer);
  EXPECT_EQ(garbled.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(garbled.status().message(),
              HasSubstr(absl::StrCat("cannot read the checkpoint ",
                                     CheckpointPath(dir))));
}

}  // namespace
}  // namespace dcp
