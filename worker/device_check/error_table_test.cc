#include "worker/device_check/error_table.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

CheckRow Row(const char* model, int64_t tokens, int checkpointed,
             double predicted_s, double measured_s, double predicted_b,
             std::optional<double> measured_b) {
  CheckRow row;
  row.model = model;
  row.num_layers = 2;
  row.tokens = tokens;
  row.checkpointed_layers = checkpointed;
  row.predicted_seconds = predicted_s;
  row.measured_seconds = measured_s;
  row.predicted_peak_bytes = predicted_b;
  row.measured_peak_bytes = measured_b;
  return row;
}

TEST(RelativeErrorTest, IsTheAbsoluteDifferenceOverTheMeasurement) {
  EXPECT_DOUBLE_EQ(*RelativeError(1.5, 1.0), 0.5);
  EXPECT_DOUBLE_EQ(*RelativeError(0.5, 1.0), 0.5);
  EXPECT_DOUBLE_EQ(*RelativeError(3.0, 3.0), 0.0);
  EXPECT_FALSE(RelativeError(1.0, 0.0).has_value());
  EXPECT_FALSE(RelativeError(1.0, -2.0).has_value());
}

TEST(SummarizeErrorsTest, NearestRankMedianAndWorst) {
  const ErrorSummary odd = SummarizeErrors({0.3, 0.1, 0.2});
  EXPECT_EQ(odd.count, 3);
  EXPECT_DOUBLE_EQ(odd.median, 0.2);
  EXPECT_DOUBLE_EQ(odd.worst, 0.3);
  // Even counts take the lower middle value (the ceil(n/2)-th smallest).
  const ErrorSummary even = SummarizeErrors({0.4, 0.1, 0.3, 0.2});
  EXPECT_DOUBLE_EQ(even.median, 0.2);
  EXPECT_DOUBLE_EQ(even.worst, 0.4);
  EXPECT_EQ(SummarizeErrors({}).count, 0);
}

TEST(FormatErrorTableTest, PrintsEveryRowWithItsErrors) {
  const std::string table = FormatErrorTable({
      Row("llama3-8b", 4096, 0, 0.2, 0.25, 3e9, 4e9),
      Row("video-dit-1b", 16384, 8, 1.0, 0.5, 2e9, std::nullopt),
  });
  EXPECT_THAT(table, HasSubstr("| llama3-8b | 2 | 4096 | 0 | 0.2 | 0.25 | "
                               "20.00% | 3000000000 | 4000000000 | 25.00% |"));
  EXPECT_THAT(table, HasSubstr("| video-dit-1b | 2 | 16384 | 8 | 1 | 0.5 | "
                               "100.00% | 2000000000 | n/a | n/a |"));
  EXPECT_THAT(table,
              HasSubstr("time error over 2 rows: median 20.00%, worst 100.00% "
                        "(video-dit-1b, 16384 tokens, 8 recomputed)"));
  EXPECT_THAT(table,
              HasSubstr("peak error over 1 rows: median 25.00%, worst 25.00% "
                        "(llama3-8b, 4096 tokens, 0 recomputed)"));
}

TEST(FormatErrorTableTest, ErrorsComeFromThePrintedValues) {
  // 1.0000004 prints as 1; the error printed is that of 1 against 2.
  const std::string table =
      FormatErrorTable({Row("m", 8, 0, 1.0000004, 2.0, 10.4, 20.0)});
  EXPECT_THAT(table, HasSubstr("| 1 | 2 | 50.00% | 10 | 20 | 50.00% |"));
}

TEST(FormatErrorTableTest, SaysWhenThereAreNoRows) {
  const std::string table = FormatErrorTable({});
  EXPECT_THAT(table, HasSubstr("time error: no rows"));
  EXPECT_THAT(table, HasSubstr("peak error: no rows"));
  EXPECT_THAT(table, Not(HasSubstr("median")));
}

TEST(FormatErrorTableTsvTest, OneLinePerRowAndAHeader) {
  const std::string tsv =
      FormatErrorTableTsv({Row("m", 8, 1, 0.5, 0.25, 100, std::nullopt)});
  EXPECT_EQ(tsv,
            "model\tlayers\ttokens\tcheckpointed_layers\tpredicted_seconds\t"
            "measured_seconds\tpredicted_peak_bytes\tmeasured_peak_bytes\n"
            "m\t2\t8\t1\t0.5\t0.25\t100\tn/a\n");
}

}  // namespace
}  // namespace dcp
