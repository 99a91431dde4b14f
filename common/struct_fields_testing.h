// Test helpers over a struct's table of members (struct_fields.h): a
// member's name, and GoogleTest comparisons member by member.

#ifndef DCP_COMMON_STRUCT_FIELDS_TESTING_H_
#define DCP_COMMON_STRUCT_FIELDS_TESTING_H_

#include <variant>

#include "absl/types/span.h"
#include "common/struct_fields.h"
#include "gtest/gtest.h"

namespace dcp {
namespace testing {

/// The name that `fields` gives `member`; nullptr when it has none.
template <typename Struct, typename Member>
const char* FieldName(absl::Span<const StructField<Struct>> fields,
                      Member Struct::*member) {
  for (const StructField<Struct>& field : fields) {
    const auto* same = std::get_if<Member Struct::*>(&field.member);
    if (same != nullptr && *same == member) return field.name;
  }
  return nullptr;
}

/// Each member that `fields` names is the same in `a` and `b`; a failure
/// names the member.
template <typename Struct>
void ExpectEveryFieldEq(absl::Span<const StructField<Struct>> fields,
                        const Struct& a, const Struct& b) {
  for (const StructField<Struct>& field : fields) {
    std::visit(
        [&](auto member) { EXPECT_EQ(a.*member, b.*member) << field.name; },
        field.member);
  }
}

}  // namespace testing
}  // namespace dcp

#endif  // DCP_COMMON_STRUCT_FIELDS_TESTING_H_
