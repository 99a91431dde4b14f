// GrpcPlannerClient against a planner that is down: the retries ride through
// an outage bounded by time (RetryPolicy::outage_tolerance), not only by
// attempts, log that they wait, and succeed once a planner answers on the
// address. Time is a FakeClock advanced by the injected sleep.

#include "planner/client/planner_client.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/fake_clock.h"
#include "common/free_port.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;

/// A planner that answers ListWorkers with one worker (the rest of
/// dcp.v1.Planner is UNIMPLEMENTED): enough to see a call get through.
class ListWorkersOnly final : public v1::Planner::Service {
 public:
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* response) override {
    response->add_workers()->set_worker_id("w0");
    return grpc::Status::OK;
  }
};

GrpcPlannerClient::Options DownPlannerOptions(int port, const Clock* clock) {
  GrpcPlannerClient::Options options;
  options.target = absl::StrCat("127.0.0.1:", port);
  options.call_deadline = absl::Seconds(5);
  options.clock = clock;
  return options;
}

/// Two attempts, the first wait 1 ms, later ones up to `max_backoff`, and
/// retries for `tolerance` of outage.
void QuickRetries(GrpcPlannerClient::Options& options,
                  absl::Duration max_backoff, absl::Duration tolerance) {
  options.retry.max_attempts = 2;
  options.retry.initial_backoff = absl::Milliseconds(1);
  options.retry.max_backoff = max_backoff;
  options.retry.outage_tolerance = tolerance;
}

TEST(GrpcPlannerClientOutageTest, RidesThroughAnOutageLongerThanItsAttempts) {
  const int port = *PickFreePort("127.0.0.1");
  FakeClock clock;
  GrpcPlannerClient::Options options = DownPlannerOptions(port, &clock);
  QuickRetries(options, absl::Milliseconds(20), absl::Hours(1));
  std::vector<std::string> logged;
  options.log = [&](const std::string& line) { logged.push_back(line); };
  // The planner comes back (on the same address) after the 5th wait. The
  // waits are real but a few milliseconds: gRPC reconnects on its own
  // backoff, which Create keeps within the retry policy's.
  ListWorkersOnly service;
  std::unique_ptr<grpc::Server> server;
  int waits = 0;
  options.sleep = [&](absl::Duration wait) {
    clock.Advance(wait);
    absl::SleepFor(wait);
    if (++waits == 5) {
      grpc::ServerBuilder builder;
      builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                               grpc::InsecureServerCredentials());
      builder.RegisterService(&service);
      server = builder.BuildAndStart();
      ASSERT_NE(server, nullptr);
    }
  };
  absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> client =
      GrpcPlannerClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();

  absl::StatusOr<v1::ListWorkersResponse> response =
      (*client)->ListWorkers(v1::ListWorkersRequest());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->workers(0).worker_id(), "w0");
  // More attempts than max_attempts alone would have made.
  EXPECT_GT((*client)->attempts(), 5);
  EXPECT_THAT(logged,
              Contains(AllOf(HasSubstr("ListWorkers: planner at 127.0.0.1:"),
                             HasSubstr("unavailable for 0.0 s (attempt 1); "
                                       "waiting for it"),
                             HasSubstr("gives up after 2 attempts and 1h"))));
  EXPECT_THAT(logged, Contains(HasSubstr("answered again (OK) after")));
  server->Shutdown();
}

TEST(GrpcPlannerClientOutageTest, GivesUpOnceTheOutageOutlastsItsTolerance) {
  const int port = *PickFreePort("127.0.0.1");  // Nothing ever listens.
  FakeClock clock;
  GrpcPlannerClient::Options options = DownPlannerOptions(port, &clock);
  options.retry.max_attempts = 2;
  options.retry.outage_tolerance = absl::Seconds(40);
  std::vector<absl::Duration> waits;
  options.sleep = [&](absl::Duration wait) {
    waits.push_back(wait);
    clock.Advance(wait);
  };
  std::vector<std::string> logged;
  options.log = [&](const std::string& line) { logged.push_back(line); };
  absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> client =
      GrpcPlannerClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::Time start = clock.Now();
  const absl::Status status =
      (*client)->ListWorkers(v1::ListWorkersRequest()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  // Waited at least the tolerance, and at most one backoff (<= 6 s with
  // jitter) past it.
  const absl::Duration waited = clock.Now() - start;
  EXPECT_GE(waited, absl::Seconds(40));
  EXPECT_LE(waited, absl::Seconds(46));
  EXPECT_GT(waits.size(), 2u);
  EXPECT_EQ((*client)->attempts(), static_cast<int64_t>(waits.size()) + 1);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(absl::StrCat("planner at 127.0.0.1:", port,
                                           " unavailable after ")),
                    HasSubstr(" attempts over 4")));
  // The first wait, then one line per 10 s of the outage at most.
  EXPECT_GE(logged.size(), 4u);
  EXPECT_LE(logged.size(), 6u);
}

// The tolerance bounds the client's outage, not each call's: once one call
// has waited it out, the next call in the same outage makes only its
// max_attempts (rank 0 used to wait 100 s on a 30 s tolerance, a call at a
// time). The planner answering ends the outage, and the next one gets the
// whole tolerance again.
TEST(GrpcPlannerClientOutageTest, TheToleranceSpansCallsInOneOutage) {
  const int port = *PickFreePort("127.0.0.1");
  FakeClock clock;
  GrpcPlannerClient::Options options = DownPlannerOptions(port, &clock);
  QuickRetries(options, absl::Seconds(5), absl::Seconds(40));
  options.sleep = [&](absl::Duration wait) { clock.Advance(wait); };
  absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> client =
      GrpcPlannerClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const auto waited_by_one_call = [&] {
    const absl::Time start = clock.Now();
    const absl::Status status =
        (*client)->ListWorkers(v1::ListWorkersRequest()).status();
    return std::make_pair(status.code(), clock.Now() - start);
  };

  auto [first_code, first_wait] = waited_by_one_call();
  EXPECT_EQ(first_code, absl::StatusCode::kUnavailable);
  EXPECT_GE(first_wait, absl::Seconds(40));
  const int64_t attempts_before = (*client)->attempts();
  auto [second_code, second_wait] = waited_by_one_call();
  EXPECT_EQ(second_code, absl::StatusCode::kUnavailable);
  EXPECT_LT(second_wait, absl::Seconds(6));
  EXPECT_EQ((*client)->attempts() - attempts_before, 2);

  // The planner answers once: the outage is over.
  ListWorkersOnly service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  // Past the tolerance each call makes its 2 attempts only, which may come
  // before gRPC has reconnected: ask until one gets through.
  bool answered = false;
  for (int i = 0; i < 200 && !answered; ++i) {
    answered = (*client)->ListWorkers(v1::ListWorkersRequest()).ok();
    if (!answered) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(answered);
  server->Shutdown();
  server.reset();
  auto [third_code, third_wait] = waited_by_one_call();
  EXPECT_EQ(third_code, absl::StatusCode::kUnavailable);
  EXPECT_GE(third_wait, absl::Seconds(40));
}

// A stop request (the worker's SIGTERM) ends the wait for an unavailable
// planner within one poll of the real, sliced wait between attempts: the
// 10 s backoff is cut short after 0.1 s, after one attempt.
TEST(GrpcPlannerClientOutageTest, AStopRequestEndsTheWaitForThePlanner) {
  const int port = *PickFreePort("127.0.0.1");  // Nothing ever listens.
  GrpcPlannerClient::Options options = DownPlannerOptions(port, nullptr);
  options.retry.max_attempts = 5;
  options.retry.initial_backoff = absl::Seconds(10);
  options.retry.max_backoff = absl::Seconds(10);
  options.retry.jitter = 0;
  options.retry.outage_tolerance = absl::Hours(1);
  int polls = 0;
  options.stop_requested = [&polls] { return ++polls >= 3; };
  absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> client =
      GrpcPlannerClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::Status status =
      (*client)->ListWorkers(v1::ListWorkersRequest()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("ListWorkers: stopped on request while waiting "
                              "for the planner at 127.0.0.1:"),
                    HasSubstr("1 attempt)")));
  // Polled once before the wait and once per slice: the third poll, in the
  // wait's second slice, said stop before a second attempt (an unsliced
  // wait would have polled next after its 10 s, and attempted again).
  EXPECT_EQ((*client)->attempts(), 1);
}

TEST(GrpcPlannerClientOutageTest, ZeroToleranceIsMaxAttemptsAlone) {
  const int port = *PickFreePort("127.0.0.1");
  FakeClock clock;
  GrpcPlannerClient::Options options = DownPlannerOptions(port, &clock);
  options.retry.max_attempts = 3;
  options.sleep = [&](absl::Duration wait) { clock.Advance(wait); };
  absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> client =
      GrpcPlannerClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_THAT((*client)->ListWorkers(v1::ListWorkersRequest()).status().message(),
              HasSubstr("unavailable after 3 attempts"));
  EXPECT_EQ((*client)->attempts(), 3);

  options.retry.outage_tolerance = absl::Seconds(-1);
  EXPECT_EQ(GrpcPlannerClient::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
