// Copies between a planner-core struct and its dcp.v1 wire message by one
// table of the struct's fields that names each message field once, for both
// directions: a field cannot be written one way and forgotten the other.
// Goes through protobuf reflection, one field lookup by name per table entry
// and copy: for conversions at registration and per state record, not per
// plan. Pure functions over immutable tables; thread-safe.

#ifndef DCP_PLANNER_CLIENT_WIRE_FIELDS_H_
#define DCP_PLANNER_CLIENT_WIRE_FIELDS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "google/protobuf/message.h"

namespace dcp {

/// `value` rounded to the nearest int64 (halves away from zero), saturating
/// from +-(2^63 - 1024), the largest double below 2^63, on; NaN gives 0. For
/// a core quantity kept as a double that the wire carries as an integer.
int64_t RoundToInt64(double value);

/// One member of `Struct` and the singular message field, by name, that
/// carries it. Member types and the wire types that carry them: double in a
/// double, or in an int64 (RoundToInt64; read back as a double); int in an
/// int32; int64_t in an int32 (static_cast<int32_t>; read back widened); bool
/// in a bool; std::string in a string.
template <typename Struct>
struct WireField {
  const char* name;
  std::variant<double Struct::*, int Struct::*, int64_t Struct::*,
               bool Struct::*, std::string Struct::*>
      member;
};

namespace wire_fields_internal {

using ConstMember = std::variant<const double*, const int*, const int64_t*,
                                 const bool*, const std::string*>;
using Member = std::variant<double*, int*, int64_t*, bool*, std::string*>;

void ToMessage(ConstMember value, const char* name,
               google::protobuf::Message& to);
void FromMessage(const google::protobuf::Message& from, const char* name,
                 Member value);

}  // namespace wire_fields_internal

/// Sets each field of `to` that `fields` names from its member of `from`;
/// other fields are left as they are. A name that is not a singular field of
/// `to`, or a member type its wire type does not carry, is a programming
/// error: it aborts, naming the message and the field.
template <typename Struct, size_t N>
void CopyToMessage(const WireField<Struct> (&fields)[N], const Struct& from,
                   google::protobuf::Message& to) {
  for (const WireField<Struct>& field : fields) {
    std::visit(
        [&](auto member) {
          wire_fields_internal::ToMessage(&(from.*member), field.name, to);
        },
        field.member);
  }
}

/// Sets each member of `to` that `fields` names from its field of `from`;
/// other members are left as they are. Aborts as CopyToMessage does.
template <typename Struct, size_t N>
void CopyFromMessage(const WireField<Struct> (&fields)[N],
                     const google::protobuf::Message& from, Struct& to) {
  for (const WireField<Struct>& field : fields) {
    std::visit(
        [&](auto member) {
          wire_fields_internal::FromMessage(from, field.name, &(to.*member));
        },
        field.member);
  }
}

}  // namespace dcp

#endif  // DCP_PLANNER_CLIENT_WIRE_FIELDS_H_
