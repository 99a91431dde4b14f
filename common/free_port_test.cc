#include "common/free_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

TEST(PickFreePortTest, ReturnsAPortThatCanBeBound) {
  absl::StatusOr<int> port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_GE(*port, 1);
  ASSERT_LE(*port, 65535);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(*port));
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  ::close(fd);
}

TEST(PickFreePortTest, UnresolvableHostIsUnavailableNamingIt) {
  absl::StatusOr<int> port = PickFreePort("no-such-host.invalid");
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(port.status().message(), HasSubstr("\"no-such-host.invalid\""));
}

TEST(PickFreePortTest, AddressOfAnotherMachineIsUnavailableNamingIt) {
  // 192.0.2.0/24 is TEST-NET-1: never an address of this machine.
  absl::StatusOr<int> port = PickFreePort("192.0.2.1");
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(port.status().message(),
              HasSubstr("cannot bind a port on \"192.0.2.1\""));
}

}  // namespace
}  // namespace dcp
