#ifndef DCP_COMMON_PROCESS_SUPPORT_H_
#define DCP_COMMON_PROCESS_SUPPORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/command_line.h"

namespace dcp {

/// The environment variable's value without surrounding whitespace, or ""
/// when unset.
std::string EnvironmentValue(const char* name);

/// The shared bearer token of a job: the contents of `--token-file` when
/// given (surrounding whitespace removed; unreadable or empty is an error
/// naming the file and the fix), else $DCP_PLANNER_TOKEN, else "" (no token).
absl::StatusOr<std::string> LoadBearerToken(const ParsedFlags& flags);

/// Writes one line to stderr prefixed with a UTC timestamp. Thread-safe (a
/// single stdio call per line).
void LogLine(const std::string& line);

}  // namespace dcp

#endif  // DCP_COMMON_PROCESS_SUPPORT_H_
