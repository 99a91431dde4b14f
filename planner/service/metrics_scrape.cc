#include "planner/service/metrics_scrape.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dcp {

std::string HttpGet(int port, absl::string_view path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval timeout{/*tv_sec=*/5, /*tv_usec=*/0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    close(fd);
    return "";
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (write(fd, request.data(), request.size()) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string response;
  char buffer[4096];
  ssize_t read_bytes;
  while ((read_bytes = read(fd, buffer, sizeof(buffer))) > 0) {
    response.append(buffer, read_bytes);
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

std::optional<double> MetricValue(
    absl::string_view exposition, absl::string_view name,
    const std::map<std::string, std::string>& labels) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    const absl::string_view series = line.substr(0, space);
    const size_t brace = series.find('{');
    if (series.substr(0, brace) != name) continue;
    std::map<std::string, std::string> found;
    if (brace != absl::string_view::npos) {
      const absl::string_view inside =
          series.substr(brace + 1, series.size() - brace - 2);
      for (absl::string_view pair : absl::StrSplit(inside, ',')) {
        const size_t equals = pair.find('=');
        if (equals == absl::string_view::npos) continue;
        std::string value(pair.substr(equals + 1));
        if (value.size() >= 2) value = value.substr(1, value.size() - 2);
        found[std::string(pair.substr(0, equals))] = value;
      }
    }
    bool matches = true;
    for (const auto& [key, value] : labels) {
      const auto it = found.find(key);
      matches = matches && it != found.end() && it->second == value;
    }
    double value = 0;
    if (matches && absl::SimpleAtod(line.substr(space + 1), &value)) {
      return value;
    }
  }
  return std::nullopt;
}

}  // namespace dcp
