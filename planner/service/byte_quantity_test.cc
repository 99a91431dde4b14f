#include "planner/service/byte_quantity.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

TEST(ByteQuantityTest, ReadsKubernetesQuantities) {
  EXPECT_EQ(ParseByteQuantity("f", "0").value(), 0);
  EXPECT_EQ(ParseByteQuantity("f", "805306368").value(), 805306368);
  EXPECT_EQ(ParseByteQuantity("f", "768Mi").value(), int64_t{768} << 20);
  EXPECT_EQ(ParseByteQuantity("f", "1Gi").value(), int64_t{1} << 30);
  EXPECT_EQ(ParseByteQuantity("f", "800M").value(), 800'000'000);
  EXPECT_EQ(ParseByteQuantity("f", "2k").value(), 2000);
  EXPECT_EQ(ParseByteQuantity("f", "1Ti").value(), int64_t{1} << 40);
}

TEST(ByteQuantityTest, ReadsFractions) {
  EXPECT_EQ(ParseByteQuantity("f", "1.5Gi").value(), int64_t{3} << 29);
  EXPECT_EQ(ParseByteQuantity("f", "0.5Mi").value(), int64_t{1} << 19);
  EXPECT_EQ(ParseByteQuantity("f", ".25Ki").value(), 256);
  EXPECT_EQ(ParseByteQuantity("f", "2.G").value(), 2'000'000'000);
  // Rounded down to whole bytes.
  EXPECT_EQ(ParseByteQuantity("f", "1.9").value(), 1);
  EXPECT_EQ(ParseByteQuantity("f", "0.001Ki").value(), 1);
}

TEST(ByteQuantityTest, RefusesWhatIsNotASize) {
  for (const std::string text :
       {"", "lots", "-1Gi", "12Q", "Mi", ".", "1..5Gi", "1.5.0", "1e9",
        "inf", "nan", " 1Gi", "1Gi ", "+1", "0x10", "9223372036854775808",
        "8388608Ti", "99999999999999999999999"}) {
    absl::StatusOr<int64_t> parsed = ParseByteQuantity("memory-budget", text);
    ASSERT_FALSE(parsed.ok()) << text << " read as " << *parsed;
    EXPECT_THAT(parsed.status().message(),
                HasSubstr("--memory-budget=" + text + " is not a memory size"));
  }
  EXPECT_EQ(ParseByteQuantity("f", "9223372036854775807").value(),
            INT64_MAX);
}

}  // namespace
}  // namespace dcp
