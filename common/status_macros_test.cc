#include "common/status_macros.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

absl::Status FailIf(bool fail, int* calls) {
  ++*calls;
  if (fail) return absl::InvalidArgumentError("bad value");
  return absl::OkStatus();
}

absl::Status ReturnIfError(bool fail, int* calls, bool* reached_end) {
  DCP_RETURN_IF_ERROR(FailIf(fail, calls));
  *reached_end = true;
  return absl::OkStatus();
}

TEST(ReturnIfErrorTest, ReturnsTheErrorAndEvaluatesOnce) {
  int calls = 0;
  bool reached_end = false;
  const absl::Status status =
      ReturnIfError(/*fail=*/true, &calls, &reached_end);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "bad value");
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(reached_end);
}

TEST(ReturnIfErrorTest, ContinuesOnOk) {
  int calls = 0;
  bool reached_end = false;
  EXPECT_TRUE(ReturnIfError(/*fail=*/false, &calls, &reached_end).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(reached_end);
}

absl::StatusOr<std::unique_ptr<std::string>> MakeText(bool fail) {
  if (fail) return absl::NotFoundError("no text");
  return std::make_unique<std::string>("text");
}

// Declares the value (a move-only type) and uses it.
absl::StatusOr<size_t> TextLength(bool fail) {
  DCP_ASSIGN_OR_RETURN(auto text, MakeText(fail));
  return text->size();
}

// Assigns to an existing variable; two uses on different lines.
absl::Status Concatenate(bool fail_second, std::string* out) {
  std::unique_ptr<std::string> first;
  DCP_ASSIGN_OR_RETURN(first, MakeText(/*fail=*/false));
  DCP_ASSIGN_OR_RETURN(std::unique_ptr<std::string> second,
                       MakeText(fail_second));
  *out = *first + *second;
  return absl::OkStatus();
}

TEST(AssignOrReturnTest, DeclaresTheValue) {
  absl::StatusOr<size_t> length = TextLength(/*fail=*/false);
  ASSERT_TRUE(length.ok()) << length.status();
  EXPECT_EQ(*length, 4u);
}

TEST(AssignOrReturnTest, ReturnsTheError) {
  absl::StatusOr<size_t> length = TextLength(/*fail=*/true);
  EXPECT_EQ(length.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(length.status().message(), "no text");
}

TEST(AssignOrReturnTest, AssignsExistingVariablesAndReturnsAStatus) {
  std::string out;
  EXPECT_TRUE(Concatenate(/*fail_second=*/false, &out).ok());
  EXPECT_EQ(out, "texttext");
  out.clear();
  EXPECT_EQ(Concatenate(/*fail_second=*/true, &out).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace dcp
