#ifndef DCP_PLANNER_SERVICE_BYTE_QUANTITY_H_
#define DCP_PLANNER_SERVICE_BYTE_QUANTITY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dcp {

/// A memory size written as Kubernetes writes quantities, in bytes: plain
/// bytes ("805306368"), a binary suffix (Ki, Mi, Gi, Ti) or a decimal one
/// (k or K, M, G, T), with an optional fraction ("1.5Gi"; rounded down to
/// whole bytes). INVALID_ARGUMENT naming `--flag` and its value for anything
/// else (negative, exponents, an unknown suffix, more than 2^63 - 1 bytes).
absl::StatusOr<int64_t> ParseByteQuantity(absl::string_view flag,
                                          absl::string_view text);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_BYTE_QUANTITY_H_
