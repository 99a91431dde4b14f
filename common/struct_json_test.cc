#include "common/struct_json.h"

#include <cstdint>
#include <iterator>
#include <string>

#include "common/struct_fields.h"
#include "common/struct_fields_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

struct Sample {
  std::string label;
  int count = 0;
  int64_t size = 0;
  double rate = 0;
  bool enabled = false;
};

constexpr StructField<Sample> kSampleFields[] = {
    {"label", &Sample::label}, {"count", &Sample::count},
    {"size", &Sample::size},   {"rate", &Sample::rate},
    {"enabled", &Sample::enabled},
};

absl::Status Read(const char* text, Sample& to) {
  return StructFromJson<Sample>(kSampleFields, nlohmann::json::parse(text),
                                "sample", to);
}

TEST(StructJsonTest, ReadsEveryMemberType) {
  Sample sample;
  ASSERT_TRUE(Read(R"({"label": "a", "count": -3, "size": 2147483647,
                      "rate": 0.25, "enabled": true})",
                   sample)
                  .ok());
  EXPECT_EQ(sample.label, "a");
  EXPECT_EQ(sample.count, -3);
  EXPECT_EQ(sample.size, 2147483647);
  EXPECT_EQ(sample.rate, 0.25);
  EXPECT_TRUE(sample.enabled);
}

TEST(StructJsonTest, KeepsMembersWithoutKeys) {
  Sample sample;
  sample.count = 7;
  sample.label = "kept";
  ASSERT_TRUE(Read(R"({"rate": 3})", sample).ok());
  EXPECT_EQ(sample.count, 7);
  EXPECT_EQ(sample.label, "kept");
  EXPECT_EQ(sample.rate, 3.0);  // an integer is a number
}

TEST(StructJsonTest, RoundTrips) {
  Sample sample{"x", 4, int64_t{1} << 30, 1.5, true};
  Sample back;
  ASSERT_TRUE(StructFromJson<Sample>(
                  kSampleFields, StructToJson<Sample>(kSampleFields, sample),
                  "sample", back)
                  .ok());
  testing::ExpectEveryFieldEq<Sample>(kSampleFields, back, sample);
}

TEST(StructJsonTest, WritesOneKeyPerField) {
  const nlohmann::json json = StructToJson<Sample>(kSampleFields, Sample{});
  EXPECT_EQ(json.size(), std::size(kSampleFields));
  for (const StructField<Sample>& field : kSampleFields) {
    EXPECT_TRUE(json.contains(field.name)) << field.name;
  }
}

TEST(StructJsonTest, RefusesWrongTypesNamingFieldValueAndWhatItTakes) {
  struct Case {
    const char* json;
    const char* message;
  };
  for (const Case& c : {
           Case{R"({"label": 3})", "sample field 'label' = 3 must be a string"},
           Case{R"({"count": 1.5})",
                "sample field 'count' = 1.5 must be an integer below 2^31"},
           Case{R"({"count": 2147483648})",
                "field 'count' = 2147483648 must be an integer below 2^31"},
           Case{R"({"size": -2147483649})", "must be an integer below 2^31"},
           Case{R"({"rate": "fast"})",
                "sample field 'rate' = \"fast\" must be a number"},
           Case{R"({"enabled": 1})",
                "sample field 'enabled' = 1 must be true or false"},
       }) {
    Sample sample;
    absl::Status status = Read(c.json, sample);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.json;
  }
}

TEST(StructJsonTest, RefusesUnknownKeysListingTheKnownOnes) {
  Sample sample;
  absl::Status status = Read(R"({"cuont": 1})", sample);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "unknown sample field 'cuont'; known fields: label, count, size, "
            "rate, enabled");
}

TEST(StructFieldsTest, FieldNameFindsTheMembersName) {
  EXPECT_STREQ(testing::FieldName<Sample>(kSampleFields, &Sample::size),
               "size");
  EXPECT_STREQ(testing::FieldName<Sample>(kSampleFields, &Sample::rate),
               "rate");
  struct Other {
    double unnamed = 0;
  };
  constexpr StructField<Other> kNone[] = {{"x", &Other::unnamed}};
  EXPECT_EQ(
      testing::FieldName<Other>(absl::Span<const StructField<Other>>(kNone, 0),
                                &Other::unnamed),
      nullptr);
}

}  // namespace
}  // namespace dcp
