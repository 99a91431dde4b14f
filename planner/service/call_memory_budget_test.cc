#include "planner/service/call_memory_budget.h"

#include <memory>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

TEST(CallMemoryBudgetTest, ReservationsAddUpAndAreGivenBack) {
  CallMemoryBudget budget(100, "a test's budget");
  {
    CallMemoryBudget::Reservation a =
        budget.Reserve(60, "call a", absl::InfinitePast()).value();
    EXPECT_EQ(budget.reserved_bytes(), 60);
    // 60 + 50 > 100 and no wait: refused, naming the budget.
    absl::StatusOr<CallMemoryBudget::Reservation> b =
        budget.Reserve(50, "call b", absl::InfinitePast());
    ASSERT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(b.status().message(), HasSubstr("call b needs about 50 B"));
    EXPECT_THAT(b.status().message(), HasSubstr("a test's budget"));
    CallMemoryBudget::Reservation moved = std::move(a);
    EXPECT_EQ(budget.reserved_bytes(), 60);
  }
  EXPECT_EQ(budget.reserved_bytes(), 0);
}

TEST(CallMemoryBudgetTest, ACallOverTheWholeBudgetIsRefusedAtOnce) {
  CallMemoryBudget budget(100, "src");
  absl::StatusOr<CallMemoryBudget::Reservation> big =
      budget.Reserve(101, "GetPlan of 9 samples", absl::InfiniteFuture());
  ASSERT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("send fewer samples per call"));
}

TEST(CallMemoryBudgetTest, AWaitingCallGetsItsBytesWhenAnotherGivesThemBack) {
  CallMemoryBudget budget(100, "src");
  auto first = std::make_unique<CallMemoryBudget::Reservation>(
      budget.Reserve(80, "first", absl::InfinitePast()).value());
  // 80 + 40 > 100: the second call fits only once the first gives its
  // bytes back, which another thread does, before or while it waits.
  std::thread giver([&] { first.reset(); });
  absl::StatusOr<CallMemoryBudget::Reservation> second =
      budget.Reserve(40, "second", absl::InfiniteFuture());
  giver.join();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(budget.reserved_bytes(), 40);
}

TEST(CallMemoryBudgetTest, NoBoundReservesNothing) {
  CallMemoryBudget budget(0, "none");
  CallMemoryBudget::Reservation r =
      budget.Reserve(int64_t{1} << 40, "huge", absl::InfinitePast()).value();
  EXPECT_EQ(budget.reserved_bytes(), 0);
}

}  // namespace
}  // namespace dcp
