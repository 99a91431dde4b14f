#include "common/clock.h"

#include "absl/time/time.h"
#include "common/fake_clock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

TEST(FakeClockTest, MovesOnlyWhenAdvanced) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  EXPECT_EQ(start, absl::UnixEpoch());
  EXPECT_EQ(clock.Now(), start);
  clock.Advance(absl::Milliseconds(250));
  EXPECT_EQ(clock.Now() - start, absl::Milliseconds(250));
  clock.SetTime(absl::FromUnixSeconds(100));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(100));
}

TEST(FakeClockTest, AWallClockJumpLeavesTheMonotonicClock) {
  FakeClock clock(absl::FromUnixSeconds(1000));
  const absl::Time monotonic = clock.MonotonicNow();
  clock.JumpWallClock(absl::Seconds(120));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(1120));
  EXPECT_EQ(clock.MonotonicNow(), monotonic);
  clock.SetTime(absl::FromUnixSeconds(5));
  EXPECT_EQ(clock.MonotonicNow(), monotonic);
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(8));
  EXPECT_EQ(clock.MonotonicNow() - monotonic, absl::Seconds(3));
  clock.Advance(absl::Seconds(-2));  // the wall clock alone goes back
  EXPECT_EQ(clock.MonotonicNow() - monotonic, absl::Seconds(3));
}

TEST(FakeClockTest, WorksThroughTheInterface) {
  FakeClock fake(absl::FromUnixSeconds(7));
  const Clock& clock = fake;
  fake.Advance(absl::Seconds(3));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(10));
}

TEST(SteppingClockTest, MovesByItsStepAtEveryReading) {
  const SteppingClock clock(absl::Seconds(2), absl::FromUnixSeconds(10));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(12));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(14));
  const SteppingClock default_step;
  EXPECT_EQ(default_step.Now(), absl::UnixEpoch() + absl::Milliseconds(1));
}

TEST(RealClockTest, MonotonicReadingsNeverGoBack) {
  const Clock& clock = RealClock::Get();
  absl::Time previous = clock.MonotonicNow();
  for (int i = 0; i < 1000; ++i) {
    const absl::Time next = clock.MonotonicNow();
    ASSERT_GE(next, previous);
    previous = next;
  }
}

TEST(RealClockTest, DoesNotGoBackwards) {
  const Clock& clock = RealClock::Get();
  const absl::Time first = clock.Now();
  EXPECT_GE(clock.Now(), first);
  EXPECT_GT(first, absl::FromUnixSeconds(1'500'000'000));
}

}  // namespace
}  // namespace dcp
