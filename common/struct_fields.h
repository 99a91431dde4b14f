// A plain struct's members by name: one table per struct names each member
// once, for every format that carries the struct (JSON in struct_json.h,
// dcp.v1 messages in planner/client/wire_fields.h), so that a member cannot
// be added to one format and forgotten in another. Tables are constexpr
// arrays with static storage; immutable and thread-safe.

#ifndef DCP_COMMON_STRUCT_FIELDS_H_
#define DCP_COMMON_STRUCT_FIELDS_H_

#include <cstdint>
#include <string>
#include <variant>

namespace dcp {

/// One member of `Struct` and its name in every format (the JSON key and the
/// wire message's field name are the same).
template <typename Struct>
struct StructField {
  const char* name;
  std::variant<double Struct::*, int Struct::*, int64_t Struct::*,
               bool Struct::*, std::string Struct::*>
      member;
};

}  // namespace dcp

#endif  // DCP_COMMON_STRUCT_FIELDS_H_
