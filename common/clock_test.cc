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

TEST(FakeClockTest, WorksThroughTheInterface) {
  FakeClock fake(absl::FromUnixSeconds(7));
  const Clock& clock = fake;
  fake.Advance(absl::Seconds(3));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(10));
}

TEST(RealClockTest, DoesNotGoBackwards) {
  const Clock& clock = RealClock::Get();
  const absl::Time first = clock.Now();
  EXPECT_GE(clock.Now(), first);
  EXPECT_GT(first, absl::FromUnixSeconds(1'500'000'000));
}

}  // namespace
}  // namespace dcp
