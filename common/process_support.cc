#include "common/process_support.h"

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dcp {

std::string EnvironmentValue(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(absl::StripAsciiWhitespace(value))
                          : std::string();
}

absl::StatusOr<std::string> LoadBearerToken(const ParsedFlags& flags) {
  if (!flags.Given("token-file")) return EnvironmentValue("DCP_PLANNER_TOKEN");
  absl::StatusOr<std::string> contents = flags.FileContents("token-file");
  if (!contents.ok()) return contents.status();
  std::string token(absl::StripAsciiWhitespace(*contents));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--token-file=", flags.String("token-file"),
        ": the file is empty; write the token into it or drop the flag to "
        "run without a token"));
  }
  return token;
}

void LogLine(const std::string& line) {
  const std::string stamped =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                    absl::UTCTimeZone()),
                   " ", line, "\n");
  std::fwrite(stamped.data(), 1, stamped.size(), stderr);
}

}  // namespace dcp
