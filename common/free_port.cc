#include "common/free_port.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp {

absl::StatusOr<int> PickFreePort(const std::string& host) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  if (const int error = ::getaddrinfo(host.c_str(), "0", &hints, &addresses);
      error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve \"", host, "\": ", ::gai_strerror(error)));
  }
  std::string last_error = "no address";
  int port = 0;
  for (addrinfo* address = addresses; address != nullptr && port == 0;
       address = address->ai_next) {
    const int fd = ::socket(address->ai_family, address->ai_socktype,
                            address->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    sockaddr_storage bound = {};
    socklen_t length = sizeof(bound);
    if (::bind(fd, address->ai_addr, address->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0) {
      port = bound.ss_family == AF_INET6
                 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                 : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      last_error = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(addresses);
  if (port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind a port on \"", host, "\": ", last_error,
                     "; give a host name or address of this machine"));
  }
  return port;
}

}  // namespace dcp
