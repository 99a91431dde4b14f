#include "common/command_line.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dcp {
namespace {

const FlagSpec* FindInTable(absl::Span<const FlagSpec> table,
                            absl::string_view name) {
  for (const FlagSpec& flag : table) {
    if (name == flag.name) return &flag;
  }
  return nullptr;
}

absl::Status BadValue(absl::string_view name, absl::string_view text,
                      absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, "=", text, ": expected ", expected));
}

/// The flag's label in the usage text.
std::string Label(const FlagSpec& flag) {
  return flag.value_name == nullptr
             ? absl::StrCat("--", flag.name, "[=true|false]")
             : absl::StrCat("--", flag.name, "=", flag.value_name);
}

/// "an integer in [1, 64]", "an integer >= 0" or "an integer".
std::string IntExpectation(int64_t min, int64_t max) {
  constexpr int64_t kLowest = std::numeric_limits<int64_t>::min();
  constexpr int64_t kHighest = std::numeric_limits<int64_t>::max();
  if (min == kLowest && max == kHighest) return "an integer";
  if (max == kHighest) return absl::StrCat("an integer >= ", min);
  if (min == kLowest) return absl::StrCat("an integer <= ", max);
  return absl::StrCat("an integer in [", min, ", ", max, "]");
}

/// "a number in (0, 1]", "a number > 0" or "a number".
std::string DoubleExpectation(double min, double max, bool min_exclusive) {
  const bool bounded_below = min > -std::numeric_limits<double>::infinity();
  const bool bounded_above = max < std::numeric_limits<double>::infinity();
  if (!bounded_below && !bounded_above) return "a number";
  if (!bounded_above) {
    return absl::StrCat("a number ", min_exclusive ? ">" : ">=", " ", min);
  }
  if (!bounded_below) return absl::StrCat("a number <= ", max);
  return absl::StrCat("a number in ", min_exclusive ? "(" : "[", min, ", ", max,
                      "]");
}

}  // namespace

const FlagSpec& ParsedFlags::Find(absl::string_view name) const {
  const FlagSpec* flag = FindInTable(table_, name);
  if (flag == nullptr) {
    std::fprintf(stderr, "flag --%s is not in the flag table\n",
                 std::string(name).c_str());
    std::abort();
  }
  return *flag;
}

bool ParsedFlags::Given(absl::string_view name) const {
  Find(name);
  return values_.contains(name);
}

std::string ParsedFlags::String(absl::string_view name) const {
  const FlagSpec& flag = Find(name);
  const auto found = values_.find(name);
  return found != values_.end() ? found->second
                                : std::string(flag.default_value);
}

absl::StatusOr<bool> ParsedFlags::Bool(absl::string_view name) const {
  const std::string text = String(name);
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true" || lower == "1" || lower == "yes") return true;
  if (lower == "false" || lower == "0" || lower == "no") return false;
  return BadValue(name, text, "true or false");
}

absl::StatusOr<int64_t> ParsedFlags::Int(absl::string_view name, int64_t min,
                                         int64_t max) const {
  const std::string text = String(name);
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    return BadValue(name, text, IntExpectation(min, max));
  }
  return value;
}

absl::StatusOr<int> ParsedFlags::Int32(absl::string_view name, int min,
                                       int max) const {
  absl::StatusOr<int64_t> value = Int(name, min, max);
  if (!value.ok()) return value.status();
  return static_cast<int>(*value);
}

absl::StatusOr<uint64_t> ParsedFlags::Uint64(absl::string_view name) const {
  const std::string text = String(name);
  uint64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return BadValue(name, text, "a non-negative integer");
  }
  return value;
}

absl::StatusOr<double> ParsedFlags::Double(absl::string_view name, double min,
                                           double max,
                                           bool min_exclusive) const {
  const std::string text = String(name);
  double value = 0;
  if (!absl::SimpleAtod(text, &value) ||
      !(min_exclusive ? value > min : value >= min) || !(value <= max)) {
    return BadValue(name, text, DoubleExpectation(min, max, min_exclusive));
  }
  return value;
}

absl::StatusOr<absl::Duration> ParsedFlags::Duration(
    absl::string_view name) const {
  const std::string text = String(name);
  absl::Duration value;
  if (!absl::ParseDuration(text, &value) || value <= absl::ZeroDuration()) {
    return BadValue(name, text, "a positive duration such as 30s or 2m");
  }
  return value;
}

absl::StatusOr<std::vector<int64_t>> ParsedFlags::IntList(
    absl::string_view name, int64_t min, int64_t max) const {
  const std::string text = String(name);
  std::vector<int64_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < min || value > max) {
      return BadValue(
          name, text,
          absl::StrCat(IntExpectation(min, max),
                       " for each comma-separated item, not '", part, "'"));
    }
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<ParsedFlags> ParseFlags(int argc, const char* const* argv,
                                       absl::Span<const FlagSpec> table) {
  ParsedFlags parsed(table);
  for (int i = 1; i < argc; ++i) {
    const absl::string_view argument = argv[i];
    if (argument == "--help" || argument == "-h") {
      parsed.help_ = true;
      continue;
    }
    if (!absl::StartsWith(argument, "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", argument,
                       "'; flags look like --name=value (see --help)"));
    }
    const absl::string_view body = argument.substr(2);
    const size_t equals = body.find('=');
    const absl::string_view name = body.substr(0, equals);
    const FlagSpec* flag = FindInTable(table, name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    std::string value;
    if (equals != absl::string_view::npos) {
      value = std::string(body.substr(equals + 1));
    } else if (flag->value_name == nullptr) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " needs a value: --", name, "=", flag->value_name));
    }
    parsed.values_[std::string(name)] = std::move(value);
  }
  return parsed;
}

std::string Usage(absl::string_view program, absl::string_view summary,
                  absl::Span<const FlagSpec> table,
                  absl::string_view epilogue) {
  constexpr absl::string_view kHelpLabel = "--help";
  size_t width = kHelpLabel.size();
  for (const FlagSpec& flag : table)
    width = std::max(width, Label(flag).size());

  std::string usage = absl::StrCat(summary, "\n\nUsage: ", program,
                                   " [--flag=value ...]\n\nFlags:\n");
  const auto add_line = [&](absl::string_view label, absl::string_view help) {
    absl::StrAppend(&usage, "  ", label, std::string(width - label.size(), ' '),
                    "  ", help);
  };
  for (const FlagSpec& flag : table) {
    add_line(Label(flag), flag.help);
    if (flag.default_value[0] != '\0') {
      absl::StrAppend(&usage, " (default ", flag.default_value, ")");
    }
    absl::StrAppend(&usage, "\n");
  }
  add_line(kHelpLabel, "print this help and exit\n");
  if (!epilogue.empty()) absl::StrAppend(&usage, "\n", epilogue);
  return usage;
}

}  // namespace dcp
