#include "common/percentile.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace dcp {
namespace {

TEST(PercentileTest, EmptyIsZero) {
  EXPECT_EQ(Percentile({}, 0.5), 0);
  EXPECT_EQ(Percentile({}, 0.99), 0);
}

TEST(PercentileTest, NearestRankOfUnsortedValues) {
  // 1..10 shuffled: the p-th percentile is the ceil(p * 10)-th smallest.
  const std::vector<double> values = {7, 3, 10, 1, 9, 2, 8, 4, 6, 5};
  EXPECT_EQ(Percentile(values, 0.0), 1);
  EXPECT_EQ(Percentile(values, 0.05), 1);
  EXPECT_EQ(Percentile(values, 0.10), 1);
  EXPECT_EQ(Percentile(values, 0.11), 2);
  EXPECT_EQ(Percentile(values, 0.50), 5);
  EXPECT_EQ(Percentile(values, 0.51), 6);
  EXPECT_EQ(Percentile(values, 0.99), 10);
  EXPECT_EQ(Percentile(values, 1.0), 10);
}

TEST(PercentileTest, P99OfAHundredIsTheNinetyNinthNotAnInterpolation) {
  std::vector<double> values;
  for (int i = 100; i >= 1; --i) values.push_back(i);
  EXPECT_EQ(Percentile(values, 0.99), 99);
  EXPECT_EQ(Percentile(values, 0.50), 50);
}

TEST(PercentileTest, SingleValue) {
  EXPECT_EQ(Percentile({4.5}, 0.0), 4.5);
  EXPECT_EQ(Percentile({4.5}, 0.99), 4.5);
}

TEST(PercentileTest, FractionOutsideZeroOneIsClamped) {
  const std::vector<double> values = {3, 1, 2};
  EXPECT_EQ(Percentile(values, -1), 1);
  EXPECT_EQ(Percentile(values, 2), 3);
  EXPECT_EQ(Percentile(values, std::nan("")), 1);
}

}  // namespace
}  // namespace dcp
