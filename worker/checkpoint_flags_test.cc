#include "worker/checkpoint_flags.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/command_line.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

constexpr FlagSpec kFlags[] = {
    {"checkpoint-dir", "DIR", "", "checkpoints"},
    {"checkpoint-every", "K", "0", "every K steps"},
    {"resume", nullptr, "false", "continue"},
};

absl::StatusOr<CheckpointFlags> Read(std::vector<const char*> arguments) {
  arguments.insert(arguments.begin(), "program");
  absl::StatusOr<ParsedFlags> flags = ParseFlags(
      static_cast<int>(arguments.size()), arguments.data(), kFlags);
  if (!flags.ok()) return flags.status();
  return ReadCheckpointFlags(*flags);
}

TEST(CheckpointFlagsTest, NoneByDefault) {
  absl::StatusOr<CheckpointFlags> checkpoint = Read({});
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->dir, "");
  EXPECT_EQ(checkpoint->every, 0);
  EXPECT_FALSE(checkpoint->resume);
}

TEST(CheckpointFlagsTest, ReadsAllThree) {
  absl::StatusOr<CheckpointFlags> checkpoint =
      Read({"--checkpoint-dir=/ckpt", "--checkpoint-every=5", "--resume"});
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->dir, "/ckpt");
  EXPECT_EQ(checkpoint->every, 5);
  EXPECT_TRUE(checkpoint->resume);
}

TEST(CheckpointFlagsTest, ResumeOrPeriodicCheckpointsNeedADirectory) {
  for (const char* flag : {"--resume", "--checkpoint-every=1"}) {
    absl::StatusOr<CheckpointFlags> checkpoint = Read({flag});
    EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kInvalidArgument)
        << flag;
    EXPECT_THAT(checkpoint.status().message(),
                HasSubstr("need --checkpoint-dir"))
        << flag;
  }
  EXPECT_FALSE(Read({"--checkpoint-dir=/ckpt", "--checkpoint-every=-1"}).ok());
}

}  // namespace
}  // namespace dcp
