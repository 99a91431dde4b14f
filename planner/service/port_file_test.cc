#include "planner/service/port_file.h"

#include <string>

#include "common/test_files.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

TEST(PortFileTest, RoundTripsAndIsAbsentUntilWritten) {
  const std::string path = TestTempPath("ports");
  absl::StatusOr<std::optional<PlannerPorts>> absent = ReadPortFile(path);
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(absent->has_value());
  ASSERT_TRUE(WritePortFile(path, {50051, 0}).ok());
  absl::StatusOr<std::optional<PlannerPorts>> read = ReadPortFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ((*read)->grpc_port, 50051);
  EXPECT_EQ((*read)->metrics_port, 0);
}

TEST(PortFileTest, RefusesAnythingElseNamingTheFile) {
  for (const std::string text :
       {"", "grpc_port=1\n", "grpc_port=0\nmetrics_port=1\n",
        "grpc_port=70000\nmetrics_port=1\n", "port=1\nmetrics_port=2\n",
        "grpc_port=1\nmetrics_port=-1\n", "grpc_port=1\nmetrics_port=2\nx\n"}) {
    const std::string path = TestTempPath("bad_ports");
    WriteTestFile(path, text);
    absl::StatusOr<std::optional<PlannerPorts>> read = ReadPortFile(path);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(read.status().message().find("bad_ports"),
              absl::string_view::npos);
  }
}

TEST(PortFileTest, WriteFailureSaysWhere) {
  const absl::Status status =
      WritePortFile("/nonexistent-directory/ports", {1, 2});
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("/nonexistent-directory"),
            absl::string_view::npos)
      << status;
}

}  // namespace
}  // namespace dcp
