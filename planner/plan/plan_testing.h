#ifndef DCP_PLANNER_PLAN_TESTING_H_
#define DCP_PLANNER_PLAN_TESTING_H_

// Deterministic batches and assertions on plans for the planner's tests.
// testonly.

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "gtest/gtest.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"

namespace dcp {

/// One step of a 64-bit linear congruential generator (Knuth's MMIX
/// constants); tests draw from its top 31 bits, state >> 33. Pure.
constexpr uint64_t NextLcgState(uint64_t state) {
  return state * 6364136223846793005ULL + 1442695040888963407ULL;
}

/// `count` lengths in [low, high] drawn with NextLcgState from `seed`: the
/// same on every platform.
std::vector<int64_t> LcgLengths(int count, int64_t low, int64_t high,
                                uint64_t seed);

/// A test failure unless `got` has `want`'s strategy and step predictions
/// (step, slowest group, exposed all-reduce, lower bound) and the same groups
/// (ranks, predicted seconds) with the same micro-batches (sequences,
/// checkpointed layers, predicted seconds and peak bytes), all exactly.
void ExpectSamePlan(const Plan& got, const Plan& want);

/// The same for phased plans: strategy, barriers, step predictions, and
/// each phase as ExpectSamePlan.
void ExpectSamePhasedPlan(const PhasedPlan& got, const PhasedPlan& want);

/// Success, or the first rule of ValidatePlan that `plan` breaks:
/// `EXPECT_TRUE(IsValidPlan(...))` validates once and says why it failed.
::testing::AssertionResult IsValidPlan(const CostModel& cost_model,
                                       absl::Span<const int64_t> lengths_tokens,
                                       const Plan& plan);

/// The same for a phased plan with ValidatePhasedPlan.
::testing::AssertionResult IsValidPhasedPlan(
    const CostModel& cost_model, absl::Span<const int64_t> lengths_tokens,
    const PhasedPlan& plan);

}  // namespace dcp

#endif  // DCP_PLANNER_PLAN_TESTING_H_
