// Reads and writes a plain struct as a JSON object through its StructField
// table (struct_fields.h): the keys are the table's names.

#ifndef DCP_COMMON_STRUCT_JSON_H_
#define DCP_COMMON_STRUCT_JSON_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/struct_fields.h"
#include "nlohmann/json.hpp"

namespace dcp {
namespace struct_json_internal {

/// Sets `*member` from `value` when the JSON type carries the member's type:
/// a number for a double; an integer in [-2^31, 2^31) for an int or an
/// int64_t (no size in a spec is ever larger, and an int would wrap); true
/// or false for a bool; a string for a string. Otherwise the error
/// "<what> field '<key>' = <value> must be <what it takes>".
absl::Status SetMember(const nlohmann::json& value, absl::string_view what,
                       absl::string_view key, double* member);
absl::Status SetMember(const nlohmann::json& value, absl::string_view what,
                       absl::string_view key, int* member);
absl::Status SetMember(const nlohmann::json& value, absl::string_view what,
                       absl::string_view key, int64_t* member);
absl::Status SetMember(const nlohmann::json& value, absl::string_view what,
                       absl::string_view key, bool* member);
absl::Status SetMember(const nlohmann::json& value, absl::string_view what,
                       absl::string_view key, std::string* member);

/// "unknown <what> field '<key>'; known fields: <names>".
absl::Status UnknownField(absl::string_view what, absl::string_view key,
                          absl::Span<const char* const> names);

}  // namespace struct_json_internal

/// Sets each member of `to` that a key of `object` (a JSON object) names in
/// `fields`; members without a key keep their values. An unknown key or a
/// value of the wrong JSON type is an InvalidArgument error that names
/// `what` ("model spec"), the key, its value and what would be accepted.
template <typename Struct>
absl::Status StructFromJson(absl::Span<const StructField<Struct>> fields,
                            const nlohmann::json& object,
                            absl::string_view what, Struct& to) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    const StructField<Struct>* found = nullptr;
    for (const StructField<Struct>& field : fields) {
      if (it.key() == field.name) {
        found = &field;
        break;
      }
    }
    if (found == nullptr) {
      std::vector<const char*> names;
      for (const StructField<Struct>& field : fields) {
        names.push_back(field.name);
      }
      return struct_json_internal::UnknownField(what, it.key(), names);
    }
    absl::Status set = std::visit(
        [&](auto member) {
          return struct_json_internal::SetMember(it.value(), what, it.key(),
                                                 &(to.*member));
        },
        found->member);
    if (!set.ok()) return set;
  }
  return absl::OkStatus();
}

/// The JSON object with one key per entry of `fields`, holding its member.
template <typename Struct>
nlohmann::json StructToJson(absl::Span<const StructField<Struct>> fields,
                            const Struct& from) {
  nlohmann::json object = nlohmann::json::object();
  for (const StructField<Struct>& field : fields) {
    std::visit([&](auto member) { object[field.name] = from.*member; },
               field.member);
  }
  return object;
}

}  // namespace dcp

#endif  // DCP_COMMON_STRUCT_JSON_H_
