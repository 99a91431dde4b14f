// Unit tests of the overflow-safe integer helpers.
#include "cost_model/saturating_math.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace dcp {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(CheckedMathTest, ExactWhereItFits) {
  EXPECT_EQ(CheckedAdd(int64_t{1} << 62, (int64_t{1} << 62) - 1),
            kMax);
  EXPECT_EQ(CheckedMul(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_EQ(CheckedMul(-3, 5), -15);
  EXPECT_EQ(CheckedAdd(kMin, 0), kMin);
}

TEST(CheckedMathTest, NulloptOnOverflow) {
  EXPECT_EQ(CheckedAdd(kMax, 1), std::nullopt);
  EXPECT_EQ(CheckedAdd(kMin, -1), std::nullopt);
  EXPECT_EQ(CheckedMul(int64_t{1} << 32, int64_t{1} << 31), std::nullopt);
  EXPECT_EQ(CheckedMul(kMin, -1), std::nullopt);
}

TEST(SaturatingMathTest, ClampsInsteadOfWrapping) {
  EXPECT_EQ(SaturatingAdd(kMax, 1), kMax);
  EXPECT_EQ(SaturatingAdd(kMax, kMax), kMax);
  EXPECT_EQ(SaturatingAdd(kMin, -1), kMin);
  EXPECT_EQ(SaturatingAdd(40, 2), 42);
  // 2^40 x 2^40 would wrap to 0 in int64.
  EXPECT_EQ(SaturatingMul(int64_t{1} << 40, int64_t{1} << 40), kMax);
  EXPECT_EQ(SaturatingMul(-(int64_t{1} << 40), int64_t{1} << 40), kMin);
  EXPECT_EQ(SaturatingMul(-(int64_t{1} << 40), -(int64_t{1} << 40)), kMax);
  EXPECT_EQ(SaturatingMul(kMin, -1), kMax);
  EXPECT_EQ(SaturatingMul(6, 7), 42);
  EXPECT_EQ(SaturatingMul(0, kMax), 0);
}

TEST(CeilDivideTest, RoundsUpWithoutWrapping) {
  for (int denominator : {1, 2, 3, 4, 6, 8, 12, 16, 64}) {
    for (int64_t numerator = 0; numerator < 200; ++numerator) {
      EXPECT_EQ(CeilDivide(numerator, denominator),
                (numerator + denominator - 1) / denominator)
          << numerator << " / " << denominator;
    }
    EXPECT_EQ(CeilDivide(kMax, denominator),
              kMax / denominator + (kMax % denominator != 0))
        << denominator;
    EXPECT_GT(CeilDivide(kMax, denominator), 0) << denominator;
  }
  EXPECT_EQ(CeilDivide(kMax, 8), (int64_t{1} << 60));
  EXPECT_EQ(CeilDivide(kMax, 1), kMax);
}

TEST(SaturatingMathTest, DoublesConvertWithinRange) {
  EXPECT_EQ(SaturatingToInt64(1e300), kMax);
  EXPECT_EQ(SaturatingToInt64(-1e300), kMin);
  EXPECT_EQ(SaturatingToInt64(std::ldexp(1.0, 63)), kMax);
  EXPECT_EQ(SaturatingToInt64(std::ldexp(1.0, 62)), int64_t{1} << 62);
  EXPECT_EQ(SaturatingToInt64(std::numeric_limits<double>::infinity()), kMax);
  EXPECT_EQ(SaturatingToInt64(std::nan("")), 0);
  EXPECT_EQ(SaturatingToInt64(-2.9), -2);
  EXPECT_EQ(SaturatingToInt(1e12), std::numeric_limits<int>::max());
  EXPECT_EQ(SaturatingToInt(-1e12), std::numeric_limits<int>::min());
  EXPECT_EQ(SaturatingToInt(7.9), 7);
  EXPECT_EQ(SaturatingToInt(std::nan("")), 0);
}

}  // namespace
}  // namespace dcp
