#include "common/byte_format.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace dcp {
namespace {

constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * kKiB;
constexpr double kGiB = 1024.0 * kMiB;

TEST(FormatBytesTest, EachUnitFromOneOfIt) {
  EXPECT_EQ(FormatBytes(409.3 * kGiB), "409.3 GiB");
  EXPECT_EQ(FormatBytes(kGiB), "1.0 GiB");
  EXPECT_EQ(FormatBytes(12.5 * kMiB), "12.5 MiB");
  EXPECT_EQ(FormatBytes(kMiB), "1.0 MiB");
  EXPECT_EQ(FormatBytes(3 * kKiB), "3.0 KiB");
  EXPECT_EQ(FormatBytes(kKiB), "1.0 KiB");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(0), "0 B");
}

TEST(FormatBytesTest, JustBelowAUnitIsTheUnitBelow) {
  EXPECT_EQ(FormatBytes(0.5 * kGiB), "512.0 MiB");
  EXPECT_EQ(FormatBytes(1000 * kMiB), "1000.0 MiB");
  EXPECT_EQ(FormatBytes(0.5 * kMiB), "512.0 KiB");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
}

TEST(FormatBytesTest, NeverPrintsTenTwentyFourOfAUnit) {
  EXPECT_EQ(FormatBytes(kGiB - 1), "1.0 GiB");
  EXPECT_EQ(FormatBytes(kMiB - 1), "1.0 MiB");
  EXPECT_EQ(FormatBytes(kKiB - 0.1), "1.0 KiB");
}

TEST(FormatBytesTest, FractionsOfAByteRound) {
  EXPECT_EQ(FormatBytes(511.6), "512 B");
  EXPECT_EQ(FormatBytes(0.4), "0 B");
}

TEST(FormatBytesTest, NegativeAndNonFinite) {
  EXPECT_EQ(FormatBytes(-2.5 * kMiB), "-2.5 MiB");
  EXPECT_EQ(FormatBytes(-512), "-512 B");
  EXPECT_EQ(FormatBytes(std::numeric_limits<double>::infinity()), "inf B");
  EXPECT_EQ(FormatBytes(-std::numeric_limits<double>::infinity()), "-inf B");
  EXPECT_EQ(FormatBytes(std::nan("")), "nan B");
}

}  // namespace
}  // namespace dcp
