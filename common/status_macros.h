#ifndef DCP_COMMON_STATUS_MACROS_H_
#define DCP_COMMON_STATUS_MACROS_H_

// The two early-return macros every DCP source uses with absl::Status and
// absl::StatusOr, so no file defines its own copy.

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

/// Evaluates `expr` (an absl::Status) once and returns it from the enclosing
/// function if it is not OK.
///
///   DCP_RETURN_IF_ERROR(store.Write(key, bytes));
#define DCP_RETURN_IF_ERROR(expr)                              \
  do {                                                         \
    const ::absl::Status dcp_return_if_error_status_ = (expr); \
    if (!dcp_return_if_error_status_.ok()) {                   \
      return dcp_return_if_error_status_;                      \
    }                                                          \
  } while (false)

/// Evaluates `expr` (an absl::StatusOr<T>) once; returns its status from the
/// enclosing function if it is not OK, else moves its value into `lhs`.
/// `lhs` is an existing lvalue or a declaration:
///
///   DCP_ASSIGN_OR_RETURN(auto port, PickFreePort("127.0.0.1"));
///   DCP_ASSIGN_OR_RETURN(options.timeout, flags.Duration("timeout"));
///
/// It expands to more than one statement, so it cannot be the body of an
/// unbraced `if`. A type with a comma in it needs `auto` or an alias.
#define DCP_ASSIGN_OR_RETURN(lhs, expr) \
  DCP_ASSIGN_OR_RETURN_IMPL_(           \
      DCP_STATUS_MACROS_CONCAT_(dcp_assign_or_return_, __LINE__), lhs, expr)

// Implementation details of DCP_ASSIGN_OR_RETURN.
#define DCP_STATUS_MACROS_CONCAT_INNER_(a, b) a##b
#define DCP_STATUS_MACROS_CONCAT_(a, b) DCP_STATUS_MACROS_CONCAT_INNER_(a, b)
#define DCP_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)    \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#endif  // DCP_COMMON_STATUS_MACROS_H_
