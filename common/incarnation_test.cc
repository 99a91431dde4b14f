#include "common/incarnation.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

TEST(IncarnationTest, SixteenHexDigitsNewEachTime) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string incarnation = NewIncarnation();
    EXPECT_THAT(incarnation, ::testing::MatchesRegex("[0-9a-f]{16}"));
    seen.insert(incarnation);
  }
  EXPECT_EQ(seen.size(), 100u);
}

}  // namespace
}  // namespace dcp
