#include "common/host_port.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;

TEST(ParseHostPortTest, SplitsHostAndPort) {
  absl::StatusOr<std::pair<std::string, int>> parsed =
      ParseHostPort("10.0.0.5:29500");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(*parsed, Pair("10.0.0.5", 29500));
  EXPECT_THAT(*ParseHostPort("planner.svc:1"), Pair("planner.svc", 1));
  EXPECT_THAT(*ParseHostPort("localhost:65535"), Pair("localhost", 65535));
}

TEST(ParseHostPortTest, RemovesTheBracketsOfAnIpv6Host) {
  EXPECT_THAT(*ParseHostPort("[::1]:8080"), Pair("::1", 8080));
  EXPECT_THAT(*ParseHostPort("[fe80::1%eth0]:80"), Pair("fe80::1%eth0", 80));
}

TEST(ParseHostPortTest, RejectsBadAddressesNamingThem) {
  for (const char* address :
       {"", "host", "host:", ":80", "[]:80", "host:0", "host:65536", "host:-1",
        "host:+80", "host: 80", "host:80x", "host:99999999999"}) {
    absl::StatusOr<std::pair<std::string, int>> parsed = ParseHostPort(address);
    ASSERT_FALSE(parsed.ok()) << address;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(),
                HasSubstr(absl::StrCat("\"", address, "\"")));
    EXPECT_THAT(parsed.status().message(), HasSubstr("1..65535"));
  }
}

TEST(ParseListenAddressTest, AllowsPortZeroAndRefusesOutOfRange) {
  EXPECT_THAT(*ParseListenAddress("0.0.0.0:0"), Pair("0.0.0.0", 0));
  EXPECT_THAT(*ParseListenAddress("127.0.0.1:50051"), Pair("127.0.0.1", 50051));
  // 70000 would be truncated to 4464 by a 16-bit port.
  for (const char* address : {"127.0.0.1:70000", "127.0.0.1:-1", ":0", "x"}) {
    absl::StatusOr<std::pair<std::string, int>> parsed =
        ParseListenAddress(address);
    ASSERT_FALSE(parsed.ok()) << address;
    EXPECT_THAT(parsed.status().message(), HasSubstr("0..65535"));
  }
}

TEST(JoinHostPortTest, BracketsIpv6HostsOnly) {
  EXPECT_EQ(JoinHostPort("10.0.0.5", 29500), "10.0.0.5:29500");
  EXPECT_EQ(JoinHostPort("::1", 80), "[::1]:80");
}

TEST(JoinHostPortTest, RoundTripsThroughParse) {
  for (const char* host : {"127.0.0.1", "::1", "planner"}) {
    EXPECT_THAT(*ParseHostPort(JoinHostPort(host, 4242)), Pair(host, 4242));
  }
}

}  // namespace
}  // namespace dcp
