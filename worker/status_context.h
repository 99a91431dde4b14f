// WithContext: an error with the phase it failed in in front of its message.

#ifndef DCP_WORKER_STATUS_CONTEXT_H_
#define DCP_WORKER_STATUS_CONTEXT_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dcp {

/// `status` with "<context>: " in front of its message, same code (OK stays
/// OK). Pure function.
inline absl::Status WithContext(const absl::Status& status,
                                absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

}  // namespace dcp

#endif  // DCP_WORKER_STATUS_CONTEXT_H_
