// Copies between a planner-core struct and its dcp.v1 wire message by one
// table of the struct's fields that names each message field once, for both
// directions: a field cannot be written one way and forgotten the other.
// Goes through protobuf reflection: each table's names are looked up in its
// message once, at its first copy (a function-local static); each copy then
// sets or gets one field per entry, with no lookup by name. Immutable tables;
// thread-safe.

#ifndef DCP_PLANNER_CLIENT_WIRE_FIELDS_H_
#define DCP_PLANNER_CLIENT_WIRE_FIELDS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <variant>

#include "common/struct_fields.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace dcp {

/// `value` rounded to the nearest int64 (halves away from zero), saturating
/// from +-(2^63 - 1024), the largest double below 2^63, on; NaN gives 0. For
/// a core quantity kept as a double that the wire carries as an integer.
int64_t RoundToInt64(double value);

/// The tables are StructField<Struct> (common/struct_fields.h): each entry
/// names the singular message field that carries its member. Member types
/// and the wire types that carry them: double in a double, or in an int64
/// (RoundToInt64; read back as a double); int in an int32; int64_t in an
/// int32 (static_cast<int32_t>; read back widened); bool in a bool;
/// std::string in a string.

namespace wire_fields_internal {

using ConstMember = std::variant<const double*, const int*, const int64_t*,
                                 const bool*, const std::string*>;
using Member = std::variant<double*, int*, int64_t*, bool*, std::string*>;

/// A table entry's field of its message, and which of the conversions of its
/// member type (by index) the field's wire type takes.
struct FoundField {
  const google::protobuf::FieldDescriptor* field = nullptr;
  size_t carrier = 0;
};

/// The singular field `name` of `message` that carries a member of the type
/// `type` points to (its value unused); aborts when there is none.
FoundField FindField(const google::protobuf::Descriptor& message,
                     const char* name, ConstMember type);

/// A null pointer of the type of `member`, naming that type for FindField.
template <typename Struct, typename T>
const T* NullOfMemberType(T Struct::*) {
  return nullptr;
}

void ToMessage(ConstMember value, const FoundField& found,
               google::protobuf::Message& to);
void FromMessage(const google::protobuf::Message& from, const FoundField& found,
                 Member value);

/// The fields of Proto that `kFields` names, found at the first call.
template <const auto& kFields, typename Proto>
const auto& FoundFields() {
  static const auto found = [] {
    std::array<FoundField, std::size(kFields)> fields;
    for (size_t i = 0; i < fields.size(); ++i) {
      fields[i] = std::visit(
          [&](auto member) {
            return FindField(*Proto::descriptor(), kFields[i].name,
                             NullOfMemberType(member));
          },
          kFields[i].member);
    }
    return fields;
  }();
  return found;
}

}  // namespace wire_fields_internal

/// Sets each field of `to` that `kFields` (an array of StructField<Struct>
/// with static storage) names from its member of `from`; other fields are
/// left as they are. A name that is not a singular field of Proto, or a
/// member type its wire type does not carry, is a programming error: the
/// first copy by the table aborts, naming the message and the field.
template <const auto& kFields, typename Struct, typename Proto>
void CopyToMessage(const Struct& from, Proto& to) {
  const auto& found = wire_fields_internal::FoundFields<kFields, Proto>();
  for (size_t i = 0; i < found.size(); ++i) {
    std::visit(
        [&](auto member) {
          wire_fields_internal::ToMessage(&(from.*member), found[i], to);
        },
        kFields[i].member);
  }
}

/// Sets each member of `to` that `kFields` names from its field of `from`;
/// other members are left as they are. Aborts as CopyToMessage does.
template <const auto& kFields, typename Struct, typename Proto>
void CopyFromMessage(const Proto& from, Struct& to) {
  const auto& found = wire_fields_internal::FoundFields<kFields, Proto>();
  for (size_t i = 0; i < found.size(); ++i) {
    std::visit(
        [&](auto member) {
          wire_fields_internal::FromMessage(from, found[i], &(to.*member));
        },
        kFields[i].member);
  }
}

}  // namespace dcp

#endif  // DCP_PLANNER_CLIENT_WIRE_FIELDS_H_
