// WriteCheckpoint / ReadCheckpoint on their own: a round trip into a fresh
// model and optimizer, and each way a checkpoint can be refused.

#include "worker/execution/checkpoint.h"

#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A fresh directory under TEST_TMPDIR for each test.
std::string TestDirectory() { return FreshTestDirectory("checkpoint_"); }

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

/// Names of the files in `dir`.
std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

/// Limits the size of any file this process writes (RLIMIT_FSIZE) while it
/// lives: a write past it fails with EFBIG, as a full disk fails one with
/// ENOSPC. SIGXFSZ is ignored meanwhile (its default kills the process).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    saved_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limited = saved_;
    limited.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limited);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, saved_handler_);
  }

 private:
  rlimit saved_ = {};
  void (*saved_handler_)(int) = SIG_DFL;
};

TEST(CheckpointTest, AFailedWriteKeepsThePreviousCheckpointAndLeavesNoFile) {
  const std::string dir = TestDirectory();
  Trained first = MakeTrained(/*seed=*/1, /*steps=*/1);
  ASSERT_TRUE(
      WriteCheckpoint(dir, /*next_step=*/3, "tiny", *first.model,
                      *first.optimizer)
          .ok());
  Trained second = MakeTrained(/*seed=*/2, /*steps=*/2);
  absl::Status status;
  {
    // The checkpoint is a few kilobytes; 1 KiB of it gets written.
    FileSizeLimit limit(/*bytes=*/1024);
    status = WriteCheckpoint(dir, /*next_step=*/5, "tiny", *second.model,
                             *second.optimizer);
  }
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("File too large"));
  EXPECT_THAT(status.message(), HasSubstr(dir));
  EXPECT_EQ(FilesIn(dir), std::vector<std::string>{"checkpoint.pt"});

  Trained loaded = MakeTrained(/*seed=*/3, /*steps=*/1);
  absl::StatusOr<std::optional<int64_t>> next =
      ReadCheckpoint(dir, "tiny", *loaded.model, *loaded.optimizer);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, std::optional<int64_t>(3));
  EXPECT_TRUE(torch::equal(loaded.model->weight, first.model->weight));
}

TEST(CheckpointTest, AnInjectedFullDiskIsReturnedWithItsCode) {
  const std::string dir = TestDirectory();
  Trained first = MakeTrained(/*seed=*/1, /*steps=*/1);
  ASSERT_TRUE(WriteCheckpoint(dir, /*next_step=*/2, "tiny", *first.model,
                              *first.optimizer)
                  .ok());
  std::string written_path;
  size_t written_bytes = 0;
  const CheckpointFileWriter full_disk = [&](const std::string& path,
                                             absl::string_view bytes) {
    written_path = path;
    written_bytes = bytes.size();
    return FileSystemError("writing", path + "~tmp.1.0", ENOSPC);
  };
  const absl::Status status = WriteCheckpoint(
      dir, /*next_step=*/4, "tiny", *first.model, *first.optimizer, full_disk);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(absl::StrCat("writing the checkpoint (",
                                           written_bytes, " bytes) in ", dir)),
                    HasSubstr("No space left on device"),
                    HasSubstr("the previous checkpoint there, if any, is "
                              "unchanged")));
  EXPECT_EQ(written_path, CheckpointPath(dir));
  EXPECT_GT(written_bytes, 0u);
  Trained loaded = MakeTrained(/*seed=*/3, /*steps=*/1);
  absl::StatusOr<std::optional<int64_t>> next =
      ReadCheckpoint(dir, "tiny", *loaded.model, *loaded.optimizer);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, std::optional<int64_t>(2));
}

TEST(CheckpointTest, RoundTripsIntoTheSameParameterTensors) {
  const std::string dir = TestDirectory();
  Trained saved = MakeTrained(/*seed=*/1, /*steps=*/3);
  ASSERT_TRUE(WriteCheckpoint(dir, /*next_step=*/7, "tiny", *saved.model,
                              *saved.optimizer)
                  .ok());
  EXPECT_EQ(FilesIn(dir), std::vector<std::string>{"checkpoint.pt"});

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

  WriteTestFile(CheckpointPath(dir), "not a zip");
  absl::StatusOr<std::optional<int64_t>> garbled =
      ReadCheckpoint(dir, "tiny", *trained.model, *trained.optimizer);
  EXPECT_EQ(garbled.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(garbled.status().message(),
              HasSubstr(absl::StrCat("cannot read the checkpoint ",
                                     CheckpointPath(dir))));
}

CheckpointSettings Settings(const std::string& precision, bool zero1) {
  CheckpointSettings settings;
  settings.precision = precision;
  settings.zero1 = zero1;
  return settings;
}

MasterWeightState SomeMasterState() {
  MasterWeightState state;
  state.master_weights = torch::arange(15, torch::kFloat32) * 0.5;
  state.exp_avg = torch::arange(15, torch::kFloat32) * -0.25;
  state.exp_avg_sq = torch::arange(15, torch::kFloat32) * 0.125;
  state.adam_step = 4;
  return state;
}

TEST(CheckpointTest, MasterWeightsRoundTripWithAndWithoutZero1) {
  const std::string dir = TestDirectory();
  Trained trained = MakeTrained(/*seed=*/1, /*steps=*/1);
  const MasterWeightState saved = SomeMasterState();
  ASSERT_TRUE(WriteCheckpoint(dir, /*next_step=*/6, "tiny", *trained.model,
                              *trained.optimizer, /*write_file=*/{},
                              Settings("bf16", /*zero1=*/true), &saved)
                  .ok());
  // bf16 keeps master weights with ZeRO-1 or without: either resumes.
  for (bool zero1 : {true, false}) {
    Trained fresh = MakeTrained(/*seed=*/2, /*steps=*/0);
    const torch::Tensor weight = fresh.model->weight.clone();
    MasterWeightState loaded;
    absl::StatusOr<std::optional<int64_t>> next =
        ReadCheckpoint(dir, "tiny", *fresh.model, *fresh.optimizer,
                       Settings("bf16", zero1), &loaded);
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(*next, std::optional<int64_t>(6));
    EXPECT_TRUE(torch::equal(loaded.master_weights, saved.master_weights));
    EXPECT_TRUE(torch::equal(loaded.exp_avg, saved.exp_avg));
    EXPECT_TRUE(torch::equal(loaded.exp_avg_sq, saved.exp_avg_sq));
    EXPECT_EQ(loaded.adam_step, 4);
    // The executor sets the parameters from the master weights.
    EXPECT_TRUE(torch::equal(fresh.model->weight, weight));
  }
}

TEST(CheckpointTest, RefusesOtherSettingsNamingBoth) {
  const std::string dir = TestDirectory();
  Trained trained = MakeTrained(/*seed=*/1, /*steps=*/1);
  const MasterWeightState saved = SomeMasterState();
  ASSERT_TRUE(WriteCheckpoint(dir, 2, "tiny", *trained.model,
                              *trained.optimizer, {}, Settings("bf16", true),
                              &saved)
                  .ok());
  MasterWeightState loaded;
  absl::StatusOr<std::optional<int64_t>> fp32 = ReadCheckpoint(
      dir, "tiny", *trained.model, *trained.optimizer, Settings("fp32", true),
      &loaded);
  EXPECT_EQ(fp32.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fp32.status().message(),
              AllOf(HasSubstr("was written with --precision=bf16 --zero1 but "
                              "this run has --precision=fp32 --zero1"),
                    HasSubstr("resume with --precision=bf16 (with or without "
                              "--zero1)")));

  // Float32 without ZeRO-1 (the default, as checkpoints without settings)
  // keeps torch's AdamW state, which ZeRO-1 cannot take.
  ASSERT_TRUE(
      WriteCheckpoint(dir, 3, "tiny", *trained.model, *trained.optimizer).ok());
  absl::StatusOr<std::optional<int64_t>> zero1 = ReadCheckpoint(
      dir, "tiny", *trained.model, *trained.optimizer, Settings("fp32", true),
      &loaded);
  EXPECT_EQ(zero1.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(zero1.status().message(),
              AllOf(HasSubstr("was written with --precision=fp32 without "
                              "--zero1 but this run has --precision=fp32 "
                              "--zero1"),
                    HasSubstr("resume with --precision=fp32 without --zero1")));
}

TEST(CheckpointTest, MasterWeightSettingsNeedTheMasterState) {
  const std::string dir = TestDirectory();
  Trained trained = MakeTrained(/*seed=*/1, /*steps=*/1);
  const absl::Status status =
      WriteCheckpoint(dir, 2, "tiny", *trained.model, *trained.optimizer, {},
                      Settings("fp32", /*zero1=*/true), /*master=*/nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--precision=fp32 --zero1 needs the "
                                          "gathered master weights"));
  EXPECT_FALSE(std::filesystem::exists(CheckpointPath(dir)));
}

}  // namespace
}  // namespace dcp
