#include "cost_model/least_squares.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

// `fit` failed with `code` and a message containing `part`.
void ExpectFitError(const absl::StatusOr<LeastSquaresFit>& fit,
                    absl::StatusCode code, absl::string_view part) {
  EXPECT_EQ(fit.status().code(), code) << fit.status();
  EXPECT_THAT(fit.status().message(), HasSubstr(std::string(part)));
}

// Uniform double in [0, 1) from 53 random bits (platform independent).
double Uniform(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

TEST(FitLeastSquaresTest, ExactRecoveryNoiseFree) {
  // y = 3 + 2 x - 0.5 x^2 evaluated at 10 points.
  std::vector<std::vector<double>> rows;
  std::vector<double> targets;
  for (int i = 0; i < 10; ++i) {
    const double x = 0.1 * i;
    rows.push_back({1.0, x, x * x});
    targets.push_back(3 + 2 * x - 0.5 * x * x);
  }
  for (bool relative : {true, false}) {
    LeastSquaresOptions options;
    options.relative_error = relative;
    absl::StatusOr<LeastSquaresFit> fit =
        FitLeastSquares(rows, targets, options);
    ASSERT_TRUE(fit.ok()) << fit.status();
    ASSERT_EQ(fit->coefficients.size(), 3u);
    EXPECT_NEAR(fit->coefficients[0], 3.0, 1e-12);
    EXPECT_NEAR(fit->coefficients[1], 2.0, 1e-12);
    EXPECT_NEAR(fit->coefficients[2], -0.5, 1e-12);
    EXPECT_LT(fit->rms_relative_error, 1e-13);
    EXPECT_LT(fit->max_relative_error, 1e-13);
    EXPECT_EQ(fit->num_samples, 10);
  }
}

TEST(FitLeastSquaresTest, SquareSystemIsSolvedExactly) {
  const std::vector<std::vector<double>> rows = {{2, 1}, {1, 3}};
  const std::vector<double> targets = {5, 10};  // x = (1, 3).
  absl::StatusOr<LeastSquaresFit> fit = FitLeastSquares(rows, targets);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->coefficients[0], 1.0, 1e-14);
  EXPECT_NEAR(fit->coefficients[1], 3.0, 1e-14);
}

// Time = flops / throughput + bytes / bandwidth + overhead, with features of
// wildly different magnitudes, and 2% multiplicative noise.
TEST(FitLeastSquaresTest, RecoversBadlyScaledCoefficientsUnderNoise) {
  const double kSecondsPerFlop = 1.0 / 400e12;  // 400 TFLOP/s.
  const double kSecondsPerByte = 1.0 / 2e12;    // 2 TB/s.
  const double kOverheadSeconds = 3e-5;         // 30 us launch overhead.
  std::mt19937_64 rng(12345);
  std::vector<std::vector<double>> rows;
  std::vector<double> targets;
  for (int i = 0; i < 400; ++i) {
    // Sequence lengths from 16 to 128k tokens, log-uniform. Attention FLOPs
    // (~L^2, up to ~3e14) dominate long sequences, memory traffic mid-length
    // ones and the constant overhead short ones, so every term is identified.
    const double length = std::exp(std::log(16.0) +
                                   Uniform(rng) * std::log(8192.0));
    const double flops = 4.0 * 4096 * length * length;
    const double bytes = 2e5 * length * (1 + Uniform(rng));
    const double time = flops * kSecondsPerFlop + bytes * kSecondsPerByte +
                        kOverheadSeconds;
    const double noise = 1.0 + 0.02 * (2 * Uniform(rng) - 1);
    rows.push_back({flops, bytes, 1.0});
    targets.push_back(time * noise);
  }
  absl::StatusOr<LeastSquaresFit> fit = FitLeastSquares(rows, targets);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->coefficients[0] / kSecondsPerFlop, 1.0, 0.02);
  EXPECT_NEAR(fit->coefficients[1] / kSecondsPerByte, 1.0, 0.02);
  EXPECT_NEAR(fit->coefficients[2] / kOverheadSeconds, 1.0, 0.02);
  EXPECT_LT(fit->rms_relative_error, 0.02);
  EXPECT_LT(fit->max_relative_error, 0.04);
  EXPECT_EQ(fit->num_samples, 400);
}

TEST(FitLeastSquaresTest, ExtremeColumnScalesNoiseFree) {
  // Columns of magnitude ~1e12 and ~1e-3.
  std::vector<std::vector<double>> rows;
  std::vector<double> targets;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 50; ++i) {
    const double big = 1e12 * (1 + 9 * Uniform(rng));
    const double small = 1e-3 * (1 + Uniform(rng));
    rows.push_back({big, small});
    targets.push_back(2.5e-12 * big + 4e3 * small);
  }
  absl::StatusOr<LeastSquaresFit> fit = FitLeastSquares(rows, targets);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->coefficients[0] / 2.5e-12, 1.0, 1e-10);
  EXPECT_NEAR(fit->coefficients[1] / 4e3, 1.0, 1e-10);
}

TEST(FitLeastSquaresTest, RelativeModeWeightsSmallTargets) {
  // Targets spanning 1..1e6 with one outlier-free linear law: relative mode
  // should give small relative errors even on the small targets.
  std::vector<std::vector<double>> rows;
  std::vector<double> targets;
  std::mt19937_64 rng(99);
  for (int i = 0; i < 200; ++i) {
    const double x = std::pow(10.0, 6 * Uniform(rng));
    rows.push_back({x, 1.0});
    targets.push_back((0.5 * x + 1.0) * (1 + 0.01 * (2 * Uniform(rng) - 1)));
  }
  absl::StatusOr<LeastSquaresFit> fit = FitLeastSquares(rows, targets);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_LT(fit->max_relative_error, 0.025);
}

TEST(FitLeastSquaresTest, AbsoluteModeAcceptsNonPositiveTargets) {
  const std::vector<std::vector<double>> rows = {{1, 0}, {1, 1}, {1, 2}};
  const std::vector<double> targets = {-1, 0, 1};
  LeastSquaresOptions options;
  options.relative_error = false;
  absl::StatusOr<LeastSquaresFit> fit = FitLeastSquares(rows, targets, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->coefficients[0], -1.0, 1e-14);
  EXPECT_NEAR(fit->coefficients[1], 1.0, 1e-14);
  EXPECT_EQ(fit->num_samples, 3);
}

TEST(FitLeastSquaresTest, ErrorNoRows) {
  absl::StatusOr<LeastSquaresFit> fit = FitLeastSquares({}, {});
  ExpectFitError(fit, absl::StatusCode::kInvalidArgument, "no rows");
}

TEST(FitLeastSquaresTest, ErrorEmptyRow) {
  absl::StatusOr<LeastSquaresFit> fit = FitLeastSquares({{}, {}}, {1, 2});
  ExpectFitError(fit, absl::StatusCode::kInvalidArgument, "no columns");
}

TEST(FitLeastSquaresTest, ErrorRaggedRows) {
  absl::StatusOr<LeastSquaresFit> fit =
      FitLeastSquares({{1, 2}, {3, 4}, {5}}, {1, 2, 3});
  ExpectFitError(fit, absl::StatusCode::kInvalidArgument,
                 "row 2 has 1 columns");
}

TEST(FitLeastSquaresTest, ErrorTargetCountMismatch) {
  absl::StatusOr<LeastSquaresFit> fit = FitLeastSquares({{1}, {2}}, {1});
  ExpectFitError(fit, absl::StatusCode::kInvalidArgument,
                 "2 rows but 1 targets");
}

TEST(FitLeastSquaresTest, ErrorFewerRowsThanColumns) {
  absl::StatusOr<LeastSquaresFit> fit =
      FitLeastSquares({{1, 2, 3}, {4, 5, 6}}, {1, 2});
  ExpectFitError(fit, absl::StatusCode::kInvalidArgument,
                 "2 rows for 3 columns");
}

TEST(FitLeastSquaresTest, ErrorNonFiniteValue) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  absl::StatusOr<LeastSquaresFit> fit =
      FitLeastSquares({{1, 2}, {3, nan}, {5, 6}}, {1, 2, 3});
  ExpectFitError(fit, absl::StatusCode::kInvalidArgument, "rows[1][1]");
  fit = FitLeastSquares({{1, 2}, {3, 4}, {5, 6}}, {1, 2, inf});
  ExpectFitError(fit, absl::StatusCode::kInvalidArgument, "targets[2]");
}

TEST(FitLeastSquaresTest, ErrorNonPositiveTargetInRelativeMode) {
  absl::StatusOr<LeastSquaresFit> fit =
      FitLeastSquares({{1}, {2}, {3}}, {1, -0.5, 3});
  ExpectFitError(fit, absl::StatusCode::kInvalidArgument, "targets[1] = -0.5");
  EXPECT_THAT(fit.status().message(), HasSubstr("relative_error = false"));
  fit = FitLeastSquares({{1}, {2}, {3}}, {0, 1, 3});
  ExpectFitError(fit, absl::StatusCode::kInvalidArgument, "targets[0] = 0");
}

TEST(FitLeastSquaresTest, RankDeficientDetected) {
  // Column 2 = 3 * column 0 - column 1.
  std::vector<std::vector<double>> rows;
  std::vector<double> targets;
  for (int i = 1; i <= 10; ++i) {
    const double a = i, b = i * i;
    rows.push_back({a, b, 3 * a - b, 1.0});
    targets.push_back(a + b + 1);
  }
  for (bool relative : {true, false}) {
    LeastSquaresOptions options;
    options.relative_error = relative;
    absl::StatusOr<LeastSquaresFit> fit =
        FitLeastSquares(rows, targets, options);
    ExpectFitError(fit, absl::StatusCode::kFailedPrecondition, "column 2");
  }
}

TEST(FitLeastSquaresTest, RankDeficientScaledDuplicateOfHugeColumn) {
  // Column 1 = 1e-15 * column 0: same direction, very different scale.
  std::vector<std::vector<double>> rows;
  std::vector<double> targets;
  for (int i = 1; i <= 10; ++i) {
    rows.push_back({1e12 * i, 1e-3 * i, 1.0});
    targets.push_back(i + 1.0);
  }
  absl::StatusOr<LeastSquaresFit> fit = FitLeastSquares(rows, targets);
  ExpectFitError(fit, absl::StatusCode::kFailedPrecondition, "column 1");
}

TEST(FitLeastSquaresTest, AllZeroColumnDetected) {
  absl::StatusOr<LeastSquaresFit> fit =
      FitLeastSquares({{1, 0}, {2, 0}, {3, 0}}, {1, 2, 3});
  ExpectFitError(fit, absl::StatusCode::kFailedPrecondition,
                 "column 1 is all zero");
}

}  // namespace
}  // namespace dcp
