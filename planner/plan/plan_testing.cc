#include "planner/plan/plan_testing.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "planner/plan/validate.h"

namespace dcp {

std::vector<int64_t> LcgLengths(int count, int64_t low, int64_t high,
                                uint64_t seed) {
  std::vector<int64_t> lengths;
  uint64_t state = seed;
  for (int i = 0; i < count; ++i) {
    state = NextLcgState(state);
    lengths.push_back(low +
                      static_cast<int64_t>(state >> 33) % (high - low + 1));
  }
  return lengths;
}

namespace {

// Success, or a failure that shows `status`.
::testing::AssertionResult IsOk(const absl::Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status;
}

// `expect` on each pair of `got` and `want`, which must be as many; a failure
// names the `element` and its index.
template <typename T, typename Expect>
void ExpectEachSame(const std::vector<T>& got, const std::vector<T>& want,
                    const char* element, Expect expect) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(testing::Message() << element << " " << i);
    expect(got[i], want[i]);
  }
}

// The fields a Plan and a PhasedPlan share.
template <typename StepPlan>
void ExpectSameStep(const StepPlan& got, const StepPlan& want) {
  EXPECT_EQ(got.strategy, want.strategy);
  EXPECT_EQ(got.predicted_step_seconds, want.predicted_step_seconds);
  EXPECT_EQ(got.exposed_allreduce_seconds, want.exposed_allreduce_seconds);
  EXPECT_EQ(got.lower_bound_seconds, want.lower_bound_seconds);
}

void ExpectSameMicroBatch(const MicroBatchPlan& got,
                          const MicroBatchPlan& want) {
  EXPECT_EQ(got.sequence_indices, want.sequence_indices);
  EXPECT_EQ(got.checkpointed_layers, want.checkpointed_layers);
  EXPECT_EQ(got.predicted_seconds, want.predicted_seconds);
  EXPECT_EQ(got.predicted_peak_bytes, want.predicted_peak_bytes);
}

void ExpectSameGroup(const GroupPlan& got, const GroupPlan& want) {
  EXPECT_EQ(got.ranks, want.ranks);
  EXPECT_EQ(got.predicted_seconds, want.predicted_seconds);
  ExpectEachSame(got.micro_batches, want.micro_batches, "micro-batch",
                 ExpectSameMicroBatch);
}

}  // namespace

void ExpectSamePlan(const Plan& got, const Plan& want) {
  ExpectSameStep(got, want);
  EXPECT_EQ(got.slowest_group_seconds, want.slowest_group_seconds);
  ExpectEachSame(got.groups, want.groups, "group", ExpectSameGroup);
}

void ExpectSamePhasedPlan(const PhasedPlan& got, const PhasedPlan& want) {
  ExpectSameStep(got, want);
  EXPECT_EQ(got.barriers, want.barriers);
  EXPECT_EQ(got.phases_seconds, want.phases_seconds);
  ExpectEachSame(got.phases, want.phases, "phase", ExpectSamePlan);
}

::testing::AssertionResult IsValidPlan(const CostModel& cost_model,
                                       absl::Span<const int64_t> lengths_tokens,
                                       const Plan& plan) {
  return IsOk(ValidatePlan(cost_model, lengths_tokens, plan));
}

::testing::AssertionResult IsValidPhasedPlan(
    const CostModel& cost_model, absl::Span<const int64_t> lengths_tokens,
    const PhasedPlan& plan) {
  return IsOk(ValidatePhasedPlan(cost_model, lengths_tokens, plan));
}

}  // namespace dcp
