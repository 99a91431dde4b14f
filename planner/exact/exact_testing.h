#ifndef DCP_PLANNER_EXACT_TESTING_H_
#define DCP_PLANNER_EXACT_TESTING_H_

// Random small instances and plan checks for the exact references' tests.
// testonly.

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "cost_model/cost_model.h"
#include "gtest/gtest.h"
#include "planner/plan/plan.h"
#include "planner/plan/test_cost_model.h"
#include "planner/plan/validate.h"

namespace dcp {

/// A batch small enough for the exact references, on a small cluster.
struct SmallInstance {
  CostModel cost_model;
  std::vector<int64_t> lengths;
};

/// tiny, llama3-8b or video-dit-1b on 1x4, 1x8 or 2x4 H200s, with 1 to
/// `max_sequences` sequences of 256 << k tokens, k below `length_doublings`;
/// drawn from `rng` (cluster, model, count, then each length).
inline SmallInstance RandomSmallInstance(std::mt19937_64& rng,
                                         int max_sequences,
                                         int length_doublings) {
  static const char* kModels[] = {"tiny", "llama3-8b", "video-dit-1b"};
  static const int kShapes[][2] = {{1, 4}, {1, 8}, {2, 4}};
  const auto& shape = kShapes[rng() % 3];
  SmallInstance instance{MakeCostModel(kModels[rng() % 3], shape[0], shape[1]),
                         {}};
  const int n = 1 + static_cast<int>(rng() % max_sequences);
  for (int s = 0; s < n; ++s) {
    instance.lengths.push_back(256 << (rng() % length_doublings));
  }
  return instance;
}

/// `plan` is valid and PredictPlan prices it at `step_seconds`, to a
/// `tolerance` of it.
inline void ExpectValidAndPricedAt(const CostModel& cost_model,
                                   const std::vector<int64_t>& lengths,
                                   const Plan& plan, double step_seconds,
                                   double tolerance) {
  const absl::Status valid = ValidatePlan(cost_model, lengths, plan);
  // Valid, so the indices are safe to predict from.
  ASSERT_TRUE(valid.ok()) << valid;
  Plan priced = plan;
  PredictPlan(cost_model, lengths, priced);
  EXPECT_NEAR(priced.predicted_step_seconds, step_seconds,
              tolerance * step_seconds);
}

}  // namespace dcp

#endif  // DCP_PLANNER_EXACT_TESTING_H_
