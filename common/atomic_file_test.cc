#include "common/atomic_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fresh directory under TEST_TMPDIR for each test.
std::string TestDirectory() {
  const std::string directory = FreshTestDirectory("atomic_file_");
  std::filesystem::create_directories(directory);
  return directory;
}

std::vector<std::string> FileNames(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(WriteFileAtomicallyTest, CreatesAndReplacesLeavingNoTemporaryFile) {
  const std::string directory = TestDirectory();
  const std::string path = directory + "/summary.json";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  EXPECT_EQ(ReadTestFile(path), "first");
  ASSERT_TRUE(WriteFileAtomically(path, std::string("x\0y", 3)).ok());
  EXPECT_EQ(ReadTestFile(path), std::string("x\0y", 3));
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  EXPECT_EQ(ReadTestFile(path), "");
  EXPECT_THAT(FileNames(directory), ElementsAre("summary.json"));
}

TEST(WriteFileAtomicallyTest, WritesLargeContents) {
  const std::string directory = TestDirectory();
  const std::string contents(3 << 20, 'z');
  ASSERT_TRUE(WriteFileAtomically(directory + "/big", contents).ok());
  EXPECT_EQ(ReadTestFile(directory + "/big"), contents);
}

TEST(WriteFileAtomicallyTest, ConcurrentWritersEachWriteWholeFiles) {
  const std::string directory = TestDirectory();
  const std::string path = directory + "/shared";
  std::vector<std::thread> writers;
  for (int i = 0; i < 4; ++i) {
    writers.emplace_back([&path, i] {
      for (int round = 0; round < 20; ++round) {
        EXPECT_TRUE(WriteFileAtomically(path, std::string(1000, 'a' + i)).ok());
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  const std::string contents = ReadTestFile(path);
  ASSERT_EQ(contents.size(), 1000u);
  EXPECT_EQ(contents, std::string(1000, contents[0]));
  EXPECT_THAT(FileNames(directory), ElementsAre("shared"));
}

TEST(WriteFileAtomicallyTest, MissingDirectoryNamesTheFileAndLeavesNothing) {
  const std::string directory = TestDirectory();
  const absl::Status status =
      WriteFileAtomically(directory + "/missing/file", "bytes");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr(directory + "/missing/file"));
  EXPECT_THAT(status.message(), HasSubstr(std::strerror(ENOENT)));
  EXPECT_THAT(FileNames(directory), ElementsAre());
}

TEST(WriteFileAtomicallyTest, RenameOntoADirectoryFailsAndRemovesTheTemporary) {
  const std::string directory = TestDirectory();
  std::filesystem::create_directories(directory + "/occupied/child");
  const absl::Status status =
      WriteFileAtomically(directory + "/occupied", "bytes");
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(),
              HasSubstr("renaming to '" + directory + "/occupied' failed"));
  EXPECT_THAT(FileNames(directory), ElementsAre("occupied"));
}

TEST(WriteFileAtomicallyTest, RelativePathSyncsTheWorkingDirectory) {
  const std::string directory = TestDirectory();
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(directory);
  const absl::Status status = WriteFileAtomically("relative", "bytes");
  std::filesystem::current_path(previous);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ReadTestFile(directory + "/relative"), "bytes");
}

TEST(FileSystemErrorTest, MapsErrnoToCodeAndNamesThePath) {
  const absl::Status full = FileSystemError("writing", "/data/f", ENOSPC);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(),
            absl::StrCat("writing '/data/f' failed: ", std::strerror(ENOSPC)));
  EXPECT_EQ(FileSystemError("writing", "f", EDQUOT).code(),
            absl::StatusCode::kResourceExhausted);
  for (int error : {EACCES, EPERM, EROFS}) {
    EXPECT_EQ(FileSystemError("creating", "f", error).code(),
              absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(FileSystemError("renaming to", "f", EIO).code(),
            absl::StatusCode::kInternal);
}

TEST(SyncDirectoryTest, MissingDirectoryIsAnError) {
  const std::string directory = TestDirectory() + "/absent";
  const absl::Status status = SyncDirectory(directory);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(),
              HasSubstr("opening directory '" + directory + "'"));
  EXPECT_TRUE(SyncDirectory(TestDirectory()).ok());
}

}  // namespace
}  // namespace dcp
