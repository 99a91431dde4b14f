#ifndef DCP_PLANNER_SERVICE_METRICS_SCRAPE_H_
#define DCP_PLANNER_SERVICE_METRICS_SCRAPE_H_

// Reading a Prometheus endpoint on this host, for the load test and the
// tests that check the planner's metrics.

#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace dcp {

/// The body of `GET path` on 127.0.0.1:port (HTTP/1.0, no keep-alive, 5 s
/// receive timeout); empty on any failure.
std::string HttpGet(int port, absl::string_view path);

/// The value of the first series `name` in Prometheus text `exposition`
/// whose labels include all of `labels`; nullopt if there is none.
std::optional<double> MetricValue(
    absl::string_view exposition, absl::string_view name,
    const std::map<std::string, std::string>& labels = {});

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_METRICS_SCRAPE_H_
