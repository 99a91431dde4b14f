#include "cost_model/micro_batch_refit.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace dcp {
namespace {

constexpr MicroBatchRefit::Coefficients kTruth = {1.6, 2e-3, 80e-6, 25e-6};

// A micro-batch of `tokens` tokens in `sequences` sequences, `recompute`
// checkpointed layers of a 4-layer model (work: 1 us per token per pass).
MicroBatchRefit::Row RowOf(int tokens, int sequences, int recompute) {
  const double passes = 2.0 * 4 + recompute;
  return {1e-6 * tokens * passes, 1.0, passes, passes * sequences};
}

// The micro-batches step `step` reports: shapes that vary with the step.
std::vector<MicroBatchRefit::Row> StepRows(int step) {
  std::vector<MicroBatchRefit::Row> rows;
  for (int m = 0; m < 3; ++m) {
    rows.push_back(RowOf(256 + 97 * ((step * 3 + m) % 11),
                         1 + (step + m) % 6, (step + m) % 3));
  }
  return rows;
}

TEST(MicroBatchRefitTest, RecoversTheTermsThatGeneratedTheMeasurements) {
  MicroBatchRefit refit;
  for (int step = 0; step < 8; ++step) {
    for (const auto& row : StepRows(step)) {
      ASSERT_TRUE(refit.Add(row, MicroBatchRefit::Predict(row, kTruth)));
    }
  }
  std::optional<MicroBatchRefit::Coefficients> fit = refit.Solve();
  ASSERT_TRUE(fit.has_value());
  for (int j = 0; j < MicroBatchRefit::kColumns; ++j) {
    EXPECT_NEAR((*fit)[j], kTruth[j], 1e-6 * kTruth[j]) << "column " << j;
  }
}

TEST(MicroBatchRefitTest, ErrorDropsOverStepsWithNoisyMeasurements) {
  // Measurements off the truth by a deterministic +-10% pattern: the
  // refit's error on held-out micro-batches falls as steps accumulate.
  MicroBatchRefit refit;
  std::vector<MicroBatchRefit::Row> held_out;
  for (int step = 100; step < 110; ++step) {
    for (const auto& row : StepRows(step)) held_out.push_back(row);
  }
  auto error_of = [&](const MicroBatchRefit::Coefficients& c) {
    double sum = 0;
    for (const auto& row : held_out) {
      const double truth = MicroBatchRefit::Predict(row, kTruth);
      sum += std::abs(MicroBatchRefit::Predict(row, c) - truth) / truth;
    }
    return sum / held_out.size();
  };
  std::vector<double> errors;
  int index = 0;
  for (int step = 0; step < 40; ++step) {
    for (const auto& row : StepRows(step)) {
      const double noise = 1 + 0.1 * std::sin(1.7 * index++);
      refit.Add(row, MicroBatchRefit::Predict(row, kTruth) * noise);
    }
    if (std::optional<MicroBatchRefit::Coefficients> fit = refit.Solve()) {
      errors.push_back(error_of(*fit));
    }
  }
  ASSERT_GE(errors.size(), 30u);
  const double early = errors[0];
  const double late = errors.back();
  EXPECT_LT(late, early);
  EXPECT_LT(late, 0.03);
}

TEST(MicroBatchRefitTest, TooFewOrIndistinctRowsGiveNoFit) {
  MicroBatchRefit refit;
  const MicroBatchRefit::Row row = RowOf(512, 2, 1);
  for (int i = 0; i < MicroBatchRefit::kMinRows - 1; ++i) {
    refit.Add(StepRows(i)[0], 1.0);
  }
  EXPECT_FALSE(refit.Solve().has_value());  // one row short
  MicroBatchRefit same;
  for (int i = 0; i < 20; ++i) same.Add(row, 0.01);
  EXPECT_FALSE(same.Solve().has_value());  // one shape: columns confounded
  EXPECT_FALSE(same.Add(row, 0));
  EXPECT_FALSE(same.Add(row, std::nan("")));
  EXPECT_EQ(same.count(), 20);
}

TEST(MicroBatchRefitTest, RemoveTakesAReportBack) {
  MicroBatchRefit refit;
  for (int step = 0; step < 6; ++step) {
    for (const auto& row : StepRows(step)) {
      refit.Add(row, MicroBatchRefit::Predict(row, kTruth));
    }
  }
  const auto before = refit.Solve();
  ASSERT_TRUE(before.has_value());
  // A rank's report counted and then replaced by the same values.
  const MicroBatchRefit::Row wrong = RowOf(300, 1, 0);
  refit.Add(wrong, 10.0);
  refit.Remove(wrong, 10.0);
  const auto after = refit.Solve();
  ASSERT_TRUE(after.has_value());
  for (int j = 0; j < MicroBatchRefit::kColumns; ++j) {
    EXPECT_NEAR((*after)[j], (*before)[j], 1e-6 * kTruth[j]);
  }
}

TEST(MicroBatchRefitTest, NegativeFixedTermIsHeldAtZero) {
  // Measurements with no per-micro-batch cost but a slight negative pull:
  // the fit keeps every fixed term non-negative.
  MicroBatchRefit::Coefficients truth = {1.2, -1e-3, 50e-6, 10e-6};
  MicroBatchRefit refit;
  for (int step = 0; step < 10; ++step) {
    for (const auto& row : StepRows(step)) {
      refit.Add(row, std::max(1e-6, MicroBatchRefit::Predict(row, truth)));
    }
  }
  const auto fit = refit.Solve();
  ASSERT_TRUE(fit.has_value());
  EXPECT_GT((*fit)[0], 0);
  for (int j = 1; j < MicroBatchRefit::kColumns; ++j) EXPECT_GE((*fit)[j], 0);
  EXPECT_EQ((*fit)[1], 0);
}

}  // namespace
}  // namespace dcp
