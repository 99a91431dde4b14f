#ifndef DCP_COMMON_TEST_FILES_H_
#define DCP_COMMON_TEST_FILES_H_

// Files for tests: scratch files and directories under Bazel's TEST_TMPDIR
// (/tmp when run outside Bazel), and the test's runfiles. testonly.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace dcp {

/// The path of `path` (e.g. "worker/dcp_worker") among the test's runfiles
/// (Bazel's TEST_SRCDIR; the working directory outside Bazel).
inline std::string Runfile(absl::string_view path) {
  const char* root = std::getenv("TEST_SRCDIR");
  return absl::StrCat(root != nullptr ? root : ".", "/dcp/", path);
}

/// `name` in gtest's TempDir() (Bazel's TEST_TMPDIR, or /tmp outside
/// Bazel); nothing is created or removed.
inline std::string TestTempPath(absl::string_view name) {
  return absl::StrCat(::testing::TempDir(), name);
}

/// TestTempPath(<prefix><current test's name>), removed if it exists (not
/// created): a path no earlier test or run left anything at.
inline std::string FreshTestDirectory(absl::string_view prefix) {
  const std::string directory = TestTempPath(absl::StrCat(
      prefix, ::testing::UnitTest::GetInstance()->current_test_info()->name()));
  std::filesystem::remove_all(directory);
  return directory;
}

/// TestTempPath(name) as an empty directory: removed if it exists, then
/// created.
inline std::string EmptyTestDirectory(absl::string_view name) {
  const std::string directory = TestTempPath(name);
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  return directory;
}

/// The whole file at `path`, as bytes; "" when it cannot be read.
inline std::string ReadTestFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file),
                     std::istreambuf_iterator<char>());
}

/// Writes `bytes` to the file at `path`, replacing it; fails the test when
/// it cannot.
inline void WriteTestFile(const std::string& path, absl::string_view bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  EXPECT_TRUE(file.good()) << "cannot write " << path;
}

/// How many entries of `directory` have names starting with `prefix`.
inline int CountFilesWithPrefix(const std::string& directory,
                                absl::string_view prefix) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (absl::StartsWith(entry.path().filename().string(), prefix)) ++count;
  }
  return count;
}

}  // namespace dcp

#endif  // DCP_COMMON_TEST_FILES_H_
