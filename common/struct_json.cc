#include "common/struct_json.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dcp {
namespace struct_json_internal {
namespace {

// The error for `value` at `key`, which must be `takes`.
absl::Status Mistyped(const nlohmann::json& value, absl::string_view what,
                      absl::string_view key, absl::string_view takes) {
  return absl::InvalidArgumentError(absl::StrCat(
      what, " field '", key, "' = ", value.dump(), " must be ", takes));
}

// Whether `value` is an integer in [-2^31, 2^31).
bool IsInt32(const nlohmann::json& value) {
  return value.is_number_integer() &&
         value.get<int64_t>() >= -(int64_t{1} << 31) &&
         value.get<int64_t>() < (int64_t{1} << 31);
}

constexpr char kInt32[] = "an integer below 2^31";

}  // namespace

absl::Status SetMember(const nlohmann::json& value, absl::string_view what,
                       absl::string_view key, double* member) {
  if (!value.is_number()) return Mistyped(value, what, key, "a number");
  *member = value.get<double>();
  return absl::OkStatus();
}

absl::Status SetMember(const nlohmann::json& value, absl::string_view what,
                       absl::string_view key, int* member) {
  if (!IsInt32(value)) return Mistyped(value, what, key, kInt32);
  *member = static_cast<int>(value.get<int64_t>());
  return absl::OkStatus();
}

absl::Status SetMember(const nlohmann::json& value, absl::string_view what,
                       absl::string_view key, int64_t* member) {
  if (!IsInt32(value)) return Mistyped(value, what, key, kInt32);
  *member = value.get<int64_t>();
  return absl::OkStatus();
}

absl::Status SetMember(const nlohmann::json& value, absl::string_view what,
                       absl::string_view key, bool* member) {
  if (!value.is_boolean()) return Mistyped(value, what, key, "true or false");
  *member = value.get<bool>();
  return absl::OkStatus();
}

absl::Status SetMember(const nlohmann::json& value, absl::string_view what,
                       absl::string_view key, std::string* member) {
  if (!value.is_string()) return Mistyped(value, what, key, "a string");
  *member = value.get<std::string>();
  return absl::OkStatus();
}

absl::Status UnknownField(absl::string_view what, absl::string_view key,
                          absl::Span<const char* const> names) {
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", what, " field '", key,
                   "'; known fields: ", absl::StrJoin(names, ", ")));
}

}  // namespace struct_json_internal
}  // namespace dcp
