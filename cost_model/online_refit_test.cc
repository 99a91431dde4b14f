#include "cost_model/online_refit.h"

#include <optional>

#include "gtest/gtest.h"

namespace dcp {
namespace {

TEST(RefitAccumulatorTest, FactorClampedAfterEnoughObservations) {
  // {predicted, measured} seconds: everything takes twice its prediction.
  RefitAccumulator refit;
  refit.Add({{1, 2}, {1, 2}, {3, 6}});
  EXPECT_FALSE(refit.Factor().has_value());
  refit.Add({{0.5, 1}});
  EXPECT_DOUBLE_EQ(refit.Factor().value(), 2);
  refit.Remove({{0.5, 1}});
  EXPECT_EQ(refit.count(), 3);
  RefitAccumulator tiny;
  tiny.Add({{50, 1}, {50, 1}, {50, 1}, {50, 1}});
  EXPECT_DOUBLE_EQ(tiny.Factor().value(), RefitAccumulator::kMinFactor);
  EXPECT_FALSE(RefitAccumulator::Accepts(1000));
}

TEST(RefitAccumulatorTest, ScalesTheSumOfLongTailedMeasurements) {
  // Most micro-batches as predicted, one three times slower: the step, a
  // sum, takes 1.5 times its prediction (a least-squares factor of the
  // ratios would say 1.15).
  RefitAccumulator refit;
  refit.Add({{1, 1}, {1, 1}, {1, 1}, {1, 3}});
  EXPECT_DOUBLE_EQ(refit.Factor().value(), 1.5);
}

TEST(RefitAccumulatorTest, MergedIsTheAccumulatorOfBothsObservations) {
  RefitAccumulator single;
  single.Add({{1, 1}, {1, 2}});
  RefitAccumulator sp;
  sp.Add({{2, 2}, {2, 5}});
  EXPECT_FALSE(single.Factor().has_value());  // Two observations each.
  RefitAccumulator merged = single;
  merged.Merge(sp);
  RefitAccumulator all;
  all.Add({{1, 1}, {1, 2}, {2, 2}, {2, 5}});
  EXPECT_EQ(merged.count(), all.count());
  EXPECT_DOUBLE_EQ(merged.Factor().value(), all.Factor().value());
  EXPECT_DOUBLE_EQ(merged.Factor().value(), 10.0 / 6);
}

TEST(AllToAllRefitAccumulatorTest, RecoversLatencyAndBandwidth) {
  // 100 us per call and 1 GB/s: measured = calls * 1e-4 + bytes / 1e9.
  AllToAllRefitAccumulator refit;
  const double rows[][2] = {{8, 1e5}, {8, 1e6}, {12, 4e6}, {12, 2e5}};
  for (int i = 0; i < 3; ++i) {
    refit.Add(rows[i][0], rows[i][1], rows[i][0] * 1e-4 + rows[i][1] / 1e9);
  }
  EXPECT_FALSE(refit.Solve().has_value());  // Too few rows yet.
  refit.Add(rows[3][0], rows[3][1], rows[3][0] * 1e-4 + rows[3][1] / 1e9);
  std::optional<AllToAllRefitAccumulator::Fit> fit = refit.Solve();
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR(fit->latency_seconds, 1e-4, 1e-10);
  EXPECT_NEAR(fit->bus_bytes_per_second, 1e9, 1e-3);
  // A removed row no longer counts.
  refit.Remove(rows[3][0], rows[3][1], rows[3][0] * 1e-4 + rows[3][1] / 1e9);
  EXPECT_EQ(refit.count(), 3);
  // Measurements falling with the call count: the latency is held at 0.
  AllToAllRefitAccumulator falling;
  falling.Add(2, 1e6, 2e-3);
  falling.Add(20, 1e6, 1e-3);
  falling.Add(2, 2e6, 4e-3);
  falling.Add(20, 2e6, 2e-3);
  fit = falling.Solve();
  ASSERT_TRUE(fit.has_value());
  EXPECT_EQ(fit->latency_seconds, 0);
  EXPECT_GT(fit->bus_bytes_per_second, 0);
}

TEST(AllToAllRefitAccumulatorTest, SolvesTheLatencyAtAHeldBandwidth) {
  AllToAllRefitAccumulator refit;
  EXPECT_FALSE(refit.SolveLatency(1e9).has_value());
  // One shape only: latency and bandwidth cannot be told apart.
  refit.Add(8, 1e6, 8 * 2e-4 + 1e6 / 1e9);
  refit.Add(8, 1e6, 8 * 2e-4 + 1e6 / 1e9);
  std::optional<AllToAllRefitAccumulator::Fit> fit = refit.SolveLatency(1e9);
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR(fit->latency_seconds, 2e-4, 1e-12);
  EXPECT_EQ(fit->bus_bytes_per_second, 1e9);
  // Faster than the bandwidth alone allows: the latency is held at 0.
  EXPECT_EQ(refit.SolveLatency(1e8)->latency_seconds, 0);
}

TEST(AllToAllRefitAccumulatorTest, PredictsTheMeanOfLongTailedWaits) {
  // A step sums its micro-batches' all-to-all seconds, so the fit must
  // predict their mean: here two shapes, each mostly fast with one slow
  // measurement (a rank waiting for its peer).
  AllToAllRefitAccumulator refit;
  for (double m : {1e-3, 1e-3, 3e-3}) refit.Add(8, 1e5, m);
  for (double m : {5e-3, 5e-3, 9e-3}) refit.Add(8, 4e6, m);
  std::optional<AllToAllRefitAccumulator::Fit> fit = refit.Solve();
  ASSERT_TRUE(fit.has_value());
  auto predict = [&](double calls, double bytes) {
    return calls * fit->latency_seconds + bytes / fit->bus_bytes_per_second;
  };
  EXPECT_NEAR(predict(8, 1e5), 5e-3 / 3, 1e-9);
  EXPECT_NEAR(predict(8, 4e6), 19e-3 / 3, 1e-9);
}

}  // namespace
}  // namespace dcp
