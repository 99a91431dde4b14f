#ifndef DCP_COMMON_HOST_PORT_H_
#define DCP_COMMON_HOST_PORT_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dcp {

/// Splits "host:port" or "[v6-address]:port" into the host (brackets
/// removed) and the port. The port is the digits after the last ':' and must
/// be in 1..65535; the host must not be empty. INVALID_ARGUMENT naming the
/// address otherwise. Pure function.
absl::StatusOr<std::pair<std::string, int>> ParseHostPort(
    absl::string_view address);

/// ParseHostPort for an address to listen on: port 0 (pick a free port) is
/// allowed too, so the port is in 0..65535.
absl::StatusOr<std::pair<std::string, int>> ParseListenAddress(
    absl::string_view address);

/// "host:port", or "[host]:port" when `host` contains a ':' (an IPv6
/// address), so that ParseHostPort(JoinHostPort(h, p)) gives back {h, p}.
std::string JoinHostPort(absl::string_view host, int port);

}  // namespace dcp

#endif  // DCP_COMMON_HOST_PORT_H_
