#include "common/host_port.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dcp {

namespace {

absl::StatusOr<std::pair<std::string, int>> ParseAddress(
    absl::string_view address, int min_port) {
  const size_t colon = address.rfind(':');
  const absl::string_view digits = colon == absl::string_view::npos
                                       ? absl::string_view()
                                       : address.substr(colon + 1);
  bool all_digits = !digits.empty();
  for (char c : digits) all_digits = all_digits && absl::ascii_isdigit(c);
  int port = 0;
  absl::string_view host =
      colon == absl::string_view::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (!all_digits || host.empty() || !absl::SimpleAtoi(digits, &port) ||
      port < min_port || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address \"", address, "\" is not host:port with a port in ", min_port,
        "..65535; give e.g. 10.0.0.5:29500 or [::1]:29500"));
  }
  return std::make_pair(std::string(host), port);
}

}  // namespace

absl::StatusOr<std::pair<std::string, int>> ParseHostPort(
    absl::string_view address) {
  return ParseAddress(address, /*min_port=*/1);
}

absl::StatusOr<std::pair<std::string, int>> ParseListenAddress(
    absl::string_view address) {
  return ParseAddress(address, /*min_port=*/0);
}

std::string JoinHostPort(absl::string_view host, int port) {
  return absl::StrContains(host, ':') ? absl::StrCat("[", host, "]:", port)
                                      : absl::StrCat(host, ":", port);
}

}  // namespace dcp
