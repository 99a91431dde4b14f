// DifferentiableAllToAll's timing: the device is waited for right before
// each clock read around an exchange, forward and backward.

#include "worker/communication/sequence_parallel.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/torch.h"
#include "worker/communication/communicator.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;

// What happened, in order: "wait" (the device waiter), "clock" (a clock
// read), "exchange" (the all-to-all itself).
using Events = std::vector<std::string>;

class RecordingClock final : public Clock {
 public:
  explicit RecordingClock(Events* events) : events_(events) {}
  absl::Time Now() const override { return MonotonicNow(); }
  absl::Time MonotonicNow() const override {
    events_->push_back("clock");
    now_ += absl::Milliseconds(1);
    return now_;
  }

 private:
  Events* events_;
  mutable absl::Time now_ = absl::UnixEpoch();
};

// Two members whose exchange is a local copy (the order of events, not the
// data, is under test).
class RecordingGroup final : public CommGroup {
 public:
  explicit RecordingGroup(Events* events) : events_(events) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::vector<int>& global_ranks() const override { return ranks_; }
  absl::Status AllToAll(const torch::Tensor& input, torch::Tensor& output,
                        absl::Duration) override {
    events_->push_back("exchange");
    output.copy_(input);
    return absl::OkStatus();
  }
  absl::Status AllReduceSum(torch::Tensor&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status Barrier(absl::Duration) override { return absl::OkStatus(); }

 private:
  Events* events_;
  std::vector<int> ranks_ = {0, 1};
};

// A context over `group`, timed by `clock`, with statistics.
SequenceParallelContext ContextOf(CommGroup& group, const Clock& clock) {
  SequenceParallelContext context;
  context.group = &group;
  context.clock = &clock;
  context.stats = std::make_shared<CommunicationStats>();
  return context;
}

TEST(SequenceParallelTest, DeviceIsWaitedForBeforeEveryClockReadOfAnExchange) {
  Events events;
  RecordingClock clock(&events);
  RecordingGroup group(&events);
  SequenceParallelContext context = ContextOf(group, clock);
  context.wait_for_device = [&events] { events.push_back("wait"); };

  torch::Tensor input = torch::ones({2, 3}, torch::requires_grad());
  torch::Tensor output = DifferentiableAllToAll(input, context);
  EXPECT_THAT(events,
              ElementsAre("wait", "clock", "exchange", "wait", "clock"));
  events.clear();
  output.sum().backward();
  EXPECT_THAT(events,
              ElementsAre("wait", "clock", "exchange", "wait", "clock"));
  // The stats hold the two exchanges' clocked time and nothing else.
  EXPECT_EQ(context.stats->all_to_all_calls, 2);
  EXPECT_EQ(context.stats->all_to_all_time, absl::Milliseconds(2));
}

TEST(SequenceParallelTest, WithoutAWaiterTheClockIsReadAroundTheExchange) {
  Events events;
  RecordingClock clock(&events);
  RecordingGroup group(&events);
  DifferentiableAllToAll(torch::ones({2, 2}), ContextOf(group, clock));
  EXPECT_THAT(events, ElementsAre("clock", "exchange", "clock"));
}

}  // namespace
}  // namespace dcp
