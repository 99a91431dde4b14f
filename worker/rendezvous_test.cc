// Rendezvous against a FakePlannerClient: the request it registers with,
// rank 0's own store, and a later rank waiting for rank 0's store.

#include "worker/rendezvous.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "common/free_port.h"
#include "common/host_port.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/client/fake_planner_client.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::SizeIs;

/// A TCP socket listening on 127.0.0.1 (a stand-in for rank 0's store).
class Listener {
 public:
  Listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), length) == 0 &&
        ::listen(fd_, 4) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) ==
            0) {
      port_ = ntohs(address.sin_port);
    }
  }
  ~Listener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

/// A complete world of two in which this worker is `rank`, with rank 0's
/// store at `address`.
v1::RegisterWorkerResponse Complete(int rank, const std::string& address) {
  v1::RegisterWorkerResponse response;
  response.set_first_rank(rank);
  response.set_num_ranks(1);
  response.set_world_size(2);
  response.set_world_complete(true);
  response.set_rendezvous_address(address);
  return response;
}

struct Fixture {
  Fixture() {
    options.worker_id = "worker-b";
    options.node_name = "node-b";
    options.job_id = "train-7";
    options.backend = "gloo";
    options.libtorch_version = "1.13.0";
    options.max_cached_groups = 3;
    options.precision = "fp32";
    options.optimizer_sharding = "none";
    options.world_timeout = absl::Minutes(1);
    options.sleep = [this](absl::Duration duration) {
      waits.push_back(duration);
      clock.Advance(duration);
    };
    options.log = [this](const std::string& line) { logged.push_back(line); };
  }

  FakePlannerClient planner;
  FakeClock clock;
  RendezvousOptions options;
  std::vector<absl::Duration> waits;
  std::vector<std::string> logged;
};

TEST(RendezvousTest, RankZeroAnnouncesItsStoreAndServesItItself) {
  Fixture fixture;
  fixture.planner.register_worker.answer =
      [](const v1::RegisterWorkerRequest& request)
      -> absl::StatusOr<v1::RegisterWorkerResponse> {
    return Complete(/*rank=*/0, request.address());
  };
  Rendezvous rendezvous(fixture.planner, fixture.options, fixture.clock);
  ASSERT_EQ(*rendezvous.Register(), Rendezvous::Outcome::kWorldComplete);
  const std::vector<v1::RegisterWorkerRequest> requests =
      fixture.planner.register_worker.requests();
  ASSERT_THAT(requests, SizeIs(1));
  EXPECT_EQ(requests[0].worker_id(), "worker-b");
  EXPECT_EQ(requests[0].gpu_kind(), "cpu");
  EXPECT_EQ(requests[0].libtorch_version(), "1.13.0");
  EXPECT_EQ(requests[0].job_id(), "train-7");
  // The planner's memory model counts 1 + this many communicators.
  EXPECT_EQ(requests[0].max_cached_groups(), 3);
  // ... and one training state.
  EXPECT_EQ(requests[0].precision(), "fp32");
  EXPECT_EQ(requests[0].optimizer_sharding(), "none");
  absl::StatusOr<std::pair<std::string, int>> announced =
      ParseHostPort(requests[0].address());
  ASSERT_TRUE(announced.ok()) << announced.status();
  EXPECT_EQ(announced->first, "127.0.0.1");

  absl::StatusOr<StoreAddress> store = rendezvous.AwaitStore();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(store->host, "127.0.0.1");
  EXPECT_EQ(store->port, announced->second);
  EXPECT_THAT(fixture.planner.register_worker.requests(), SizeIs(1));
}

TEST(RendezvousTest, ALaterRankReRegistersUntilRankZerosStoreAnswers) {
  Fixture fixture;
  const Listener store;
  ASSERT_GT(store.port(), 0);
  // A stale address of rank 0's previous incarnation (nothing listens
  // there) twice, then the store's.
  const std::string stale =
      JoinHostPort("127.0.0.1", *PickFreePort("127.0.0.1"));
  auto calls = std::make_shared<int>(0);
  fixture.planner.register_worker.answer =
      [calls, stale, &store](const v1::RegisterWorkerRequest&)
      -> absl::StatusOr<v1::RegisterWorkerResponse> {
    return Complete(/*rank=*/1, ++*calls <= 2
                                    ? stale
                                    : JoinHostPort("127.0.0.1", store.port()));
  };
  Rendezvous rendezvous(fixture.planner, fixture.options, fixture.clock);
  ASSERT_EQ(*rendezvous.Register(), Rendezvous::Outcome::kWorldComplete);
  EXPECT_EQ(rendezvous.rank(), 1);
  absl::StatusOr<StoreAddress> found = rendezvous.AwaitStore();
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->port, store.port());
  EXPECT_EQ(*calls, 3);
  EXPECT_THAT(fixture.logged,
              Contains(HasSubstr(
                  absl::StrCat("waiting for rank 0's c10d store at ", stale))));
  EXPECT_THAT(fixture.waits, SizeIs(2));
}

TEST(RendezvousTest, AStoreThatNeverAnswersTimesOut) {
  Fixture fixture;
  const std::string stale =
      JoinHostPort("127.0.0.1", *PickFreePort("127.0.0.1"));
  fixture.planner.register_worker.answer =
      [stale](const v1::RegisterWorkerRequest&)
      -> absl::StatusOr<v1::RegisterWorkerResponse> {
    return Complete(/*rank=*/1, stale);
  };
  Rendezvous rendezvous(fixture.planner, fixture.options, fixture.clock);
  ASSERT_TRUE(rendezvous.Register().ok());
  const absl::Status status = rendezvous.AwaitStore().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(stale),
                    HasSubstr("did not accept connections within 1m")));
  // Backoff doubling from 100 ms up to 2 s.
  ASSERT_GE(fixture.waits.size(), 6u);
  EXPECT_EQ(fixture.waits[0], absl::Milliseconds(100));
  EXPECT_EQ(fixture.waits.back(), absl::Seconds(2));
}

TEST(RendezvousTest, AWorkerMovedToAnotherRankWhileJoiningIsRefused) {
  Fixture fixture;
  const std::string stale =
      JoinHostPort("127.0.0.1", *PickFreePort("127.0.0.1"));
  auto calls = std::make_shared<int>(0);
  fixture.planner.register_worker.answer =
      [calls, stale](const v1::RegisterWorkerRequest&)
      -> absl::StatusOr<v1::RegisterWorkerResponse> {
    return Complete(/*rank=*/++*calls == 1 ? 1 : 2, stale);
  };
  Rendezvous rendezvous(fixture.planner, fixture.options, fixture.clock);
  ASSERT_TRUE(rendezvous.Register().ok());
  const absl::Status status = rendezvous.AwaitStore().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("from rank 1 to rank 2"));
}

// The world is complete; the planner names 'worker-a' as not joined until
// `joined_on_call` (0: never).
void AnswerCompleteUntilJoined(FakePlannerClient& planner, int joined_on_call) {
  auto calls = std::make_shared<int>(0);
  planner.register_worker.answer =
      [calls, joined_on_call](const v1::RegisterWorkerRequest& request)
      -> absl::StatusOr<v1::RegisterWorkerResponse> {
    v1::RegisterWorkerResponse response =
        Complete(/*rank=*/0, request.address());
    ++*calls;
    if (joined_on_call > 0 && *calls >= joined_on_call && request.joining()) {
      response.set_world_joined(true);
    } else {
      response.set_not_joined(
          "1 of 2 workers have not joined yet: 'worker-a' (rank 1, silent for "
          "5s)");
    }
    return response;
  };
}

TEST(RendezvousTest, TheWorldIsJoinedOnceEveryWorkerSaysItIsJoining) {
  Fixture fixture;
  fixture.options.incarnation = "0123456789abcdef";
  AnswerCompleteUntilJoined(fixture.planner, /*joined_on_call=*/4);
  Rendezvous rendezvous(fixture.planner, fixture.options, fixture.clock);
  ASSERT_EQ(*rendezvous.Register(), Rendezvous::Outcome::kWorldComplete);
  const std::vector<v1::RegisterWorkerRequest> requests =
      fixture.planner.register_worker.requests();
  ASSERT_THAT(requests, SizeIs(4));
  // Joining is said at once after the world is seen complete.
  EXPECT_FALSE(requests[0].joining());
  EXPECT_TRUE(requests[1].joining());
  for (const v1::RegisterWorkerRequest& request : requests) {
    EXPECT_EQ(request.incarnation(), "0123456789abcdef");
  }
  EXPECT_THAT(fixture.logged,
              Contains(HasSubstr("waiting for every worker to join: 1 of 2 "
                                 "workers have not joined yet: 'worker-a'")));
}

TEST(RendezvousTest,
     AWorkerThatRegisteredAndWentSilentIsNamedAfterTheJoinTimeout) {
  Fixture fixture;
  fixture.options.join_timeout = absl::Seconds(20);
  AnswerCompleteUntilJoined(fixture.planner, /*joined_on_call=*/0);
  Rendezvous rendezvous(fixture.planner, fixture.options, fixture.clock);
  const absl::Time start = fixture.clock.Now();
  const absl::Status status = rendezvous.Register().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("not every worker joined within 20s"),
                    HasSubstr("'worker-a' (rank 1, silent for 5s)"),
                    HasSubstr("restart it with the same worker id")));
  // Within the join timeout and one poll, not the world timeout.
  EXPECT_LE(fixture.clock.Now() - start, absl::Seconds(22));
}

TEST(RendezvousTest, StoppingWhileWaitingForPeersToJoinStops) {
  Fixture fixture;
  fixture.options.stop_requested = [] { return true; };
  AnswerCompleteUntilJoined(fixture.planner, /*joined_on_call=*/0);
  Rendezvous rendezvous(fixture.planner, fixture.options, fixture.clock);
  EXPECT_EQ(*rendezvous.Register(), Rendezvous::Outcome::kStopRequested);
}

TEST(RendezvousTest, StoppingWhileTheWorldIsIncompleteRegistersOnce) {
  Fixture fixture;
  fixture.options.stop_requested = [] { return true; };
  fixture.planner.register_worker.answer = [](const v1::RegisterWorkerRequest&)
      -> absl::StatusOr<v1::RegisterWorkerResponse> {
    v1::RegisterWorkerResponse response;
    response.set_num_ranks(1);
    response.set_world_size(2);
    response.set_waiting_for("1 of 2 ranks");
    return response;
  };
  Rendezvous rendezvous(fixture.planner, fixture.options, fixture.clock);
  EXPECT_EQ(*rendezvous.Register(), Rendezvous::Outcome::kStopRequested);
  EXPECT_THAT(fixture.planner.register_worker.requests(), SizeIs(1));
  EXPECT_THAT(fixture.logged,
              Contains(HasSubstr("waiting for the world: 1 of 2 ranks")));
}

}  // namespace
}  // namespace dcp
