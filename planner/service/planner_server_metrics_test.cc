// GET /metrics of a real PlannerServer on 127.0.0.1 while idle and slow TCP
// clients hold connections open.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "common/clock.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/model_spec.h"
#include "gtest/gtest.h"
#include "planner/service/metrics_scrape.h"
#include "planner/service/planner_server.h"

namespace dcp {
namespace {

/// A TCP connection to 127.0.0.1:port, closed when it goes; -1 if refused.
class Connection {
 public:
  explicit Connection(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
        0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~Connection() {
    if (fd_ >= 0) close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool connected() const { return fd_ >= 0; }
  /// Sends `text` (part of a request, for a slow client).
  bool Send(const std::string& text) {
    return send(fd_, text.data(), text.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(text.size());
  }

 private:
  int fd_;
};

absl::StatusOr<std::unique_ptr<PlannerServer>> StartServer() {
  PlannerServer::Options options;
  options.handler.model = ModelPreset("tiny").value();
  options.handler.cluster = H200Cluster(/*num_nodes=*/1, /*gpus_per_node=*/8);
  options.handler.background_planning_threads = 1;
  options.metrics_address = "127.0.0.1:0";
  return PlannerServer::Start(std::move(options), RealClock::Get(),
                              /*log=*/nullptr);
}

TEST(PlannerServerMetricsTest, IdleAndSlowClientsDoNotBlockAScrape) {
  absl::StatusOr<std::unique_ptr<PlannerServer>> server = StartServer();
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->metrics_port();
  ASSERT_GT(port, 0);
  // Idle sockets that never send a byte, and slow clients stuck halfway
  // through a request line: more of each than prometheus-cpp's default of
  // two server threads (which two idle sockets used to hold for 30 s).
  std::vector<std::unique_ptr<Connection>> stalled;
  for (int i = 0; i < 8; ++i) {
    stalled.push_back(std::make_unique<Connection>(port));
    ASSERT_TRUE(stalled.back()->connected());
  }
  for (int i = 0; i < 4; ++i) {
    stalled.push_back(std::make_unique<Connection>(port));
    ASSERT_TRUE(stalled.back()->connected());
    ASSERT_TRUE(stalled.back()->Send("GET /metr"));
  }
  // HttpGet gives up after 5 s (its receive timeout): the deadline.
  const std::string metrics = HttpGet(port, "/metrics");
  EXPECT_TRUE(absl::StrContains(metrics, "dcp_")) << "scrape got: " << metrics;
}

TEST(PlannerServerMetricsTest, MoreStalledClientsThanThreadsAreDropped) {
  absl::StatusOr<std::unique_ptr<PlannerServer>> server = StartServer();
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->metrics_port();
  // Every server thread held by an idle socket: each is dropped after the
  // request timeout (2 s), well within the scrape's 5 s.
  std::vector<std::unique_ptr<Connection>> idle;
  for (int i = 0; i < PlannerServer::kMetricsThreads; ++i) {
    idle.push_back(std::make_unique<Connection>(port));
    ASSERT_TRUE(idle.back()->connected());
  }
  const std::string metrics = HttpGet(port, "/metrics");
  EXPECT_TRUE(absl::StrContains(metrics, "dcp_")) << "scrape got: " << metrics;
}

}  // namespace
}  // namespace dcp
