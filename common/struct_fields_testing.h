// GoogleTest checks over a struct's table of members (struct_fields.h).

#ifndef DCP_COMMON_STRUCT_FIELDS_TESTING_H_
#define DCP_COMMON_STRUCT_FIELDS_TESTING_H_

#include <variant>

#include "absl/types/span.h"
#include "common/struct_fields.h"
#include "gtest/gtest.h"

namespace dcp {
namespace testing {

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
