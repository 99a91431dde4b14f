#ifndef DCP_PLANNER_SERVICE_TEST_DIRECTORY_H_
#define DCP_PLANNER_SERVICE_TEST_DIRECTORY_H_

// Scratch directories for the planner service's tests. testonly.

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace dcp {

/// "<TEST_TMPDIR or /tmp>/<prefix><current test's name>", removed if it
/// exists (not created).
inline std::string FreshTestDirectory(absl::string_view prefix) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string directory = absl::StrCat(
      tmp != nullptr ? tmp : "/tmp", "/", prefix,
      ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(directory);
  return directory;
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

#endif  // DCP_PLANNER_SERVICE_TEST_DIRECTORY_H_
