#include "common/process_memory.h"

#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace dcp {
namespace {

/// The bytes of a "Name:   1234 kB" line's value, if `line` is `name`'s.
bool ParseKibLine(absl::string_view line, absl::string_view name,
                  int64_t& bytes) {
  if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, ":")) {
    return false;
  }
  line = absl::StripAsciiWhitespace(line);
  if (!absl::ConsumeSuffix(&line, "kB")) return false;
  int64_t kib = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) return false;
  bytes = kib * 1024;
  return true;
}

}  // namespace

absl::StatusOr<ProcessMemory> ReadProcessMemory(int pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/status");
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path, ": process ", pid, " is gone"));
  }
  ProcessMemory memory;
  bool has_rss = false, has_peak = false;
  for (std::string line; std::getline(in, line);) {
    has_rss = has_rss || ParseKibLine(line, "VmRSS", memory.resident_bytes);
    has_peak =
        has_peak || ParseKibLine(line, "VmHWM", memory.peak_resident_bytes);
  }
  if (!has_rss || !has_peak) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " has no VmRSS and VmHWM lines (is this Linux, and process ",
        pid, " not a zombie?)"));
  }
  return memory;
}

}  // namespace dcp
