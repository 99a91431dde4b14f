#include "common/process_support.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

constexpr FlagSpec kFlags[] = {
    {"token-file", "FILE", "", "file holding the bearer token"},
};

ParsedFlags Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "test");
  return ParseFlags(static_cast<int>(args.size()), args.data(), kFlags).value();
}

TEST(LoadBearerTokenTest, ReadsTheFileWithoutSurroundingWhitespace) {
  const std::string path = TestTempPath("token");
  std::ofstream(path) << "  s3cret\n";
  const std::string flag = "--token-file=" + path;
  EXPECT_EQ(LoadBearerToken(Parse({flag.c_str()})).value(), "s3cret");
}

TEST(LoadBearerTokenTest, EmptyOrMissingFileNamesTheFile) {
  const std::string path = TestTempPath("empty_token");
  std::ofstream(path) << " \n";
  const std::string flag = "--token-file=" + path;
  absl::StatusOr<std::string> empty = LoadBearerToken(Parse({flag.c_str()}));
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr(path));
  EXPECT_THAT(empty.status().message(), HasSubstr("empty"));
  absl::StatusOr<std::string> missing =
      LoadBearerToken(Parse({"--token-file=/no/such/token"}));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/no/such/token"));
}

TEST(LoadBearerTokenTest, FallsBackToTheEnvironment) {
  ::setenv("DCP_PLANNER_TOKEN", " from-env ", 1);
  EXPECT_EQ(LoadBearerToken(Parse({})).value(), "from-env");
  ::unsetenv("DCP_PLANNER_TOKEN");
  EXPECT_EQ(LoadBearerToken(Parse({})).value(), "");
}

}  // namespace
}  // namespace dcp
