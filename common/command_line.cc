#include "common/command_line.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

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

bool IsHelp(absl::string_view argument) {
  return argument == "--help" || argument == "-h";
}

// Wraps `text` at `width` columns, assuming it starts at column
// `start_column`; continuation lines are indented by `indent`.
std::string Wrap(absl::string_view text, size_t width, size_t start_column,
                 size_t indent) {
  std::string wrapped;
  size_t column = start_column;
  bool line_empty = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line_empty && column + 1 + word.size() > width) {
      absl::StrAppend(&wrapped, "\n", std::string(indent, ' '));
      column = indent;
      line_empty = true;
    }
    if (!line_empty) {
      wrapped += ' ';
      ++column;
    }
    absl::StrAppend(&wrapped, word);
    column += word.size();
    line_empty = false;
  }
  return wrapped;
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

absl::StatusOr<int64_t> ParsedFlags::IntWithSuffix(absl::string_view name,
                                                   int64_t min,
                                                   int64_t max) const {
  const std::string text = String(name);
  absl::string_view digits = text;
  int64_t multiplier = 1;
  if (absl::ConsumeSuffix(&digits, "K") || absl::ConsumeSuffix(&digits, "k")) {
    multiplier = int64_t{1} << 10;
  } else if (absl::ConsumeSuffix(&digits, "M") ||
             absl::ConsumeSuffix(&digits, "m")) {
    multiplier = int64_t{1} << 20;
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", text,
                     ": is not an integer (K and M suffixes allowed)"));
  }
  if (value > std::numeric_limits<int64_t>::max() / multiplier ||
      value < std::numeric_limits<int64_t>::min() / multiplier) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", text, ": is too large"));
  }
  value *= multiplier;
  if (value < min) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", text, ": must be at least ", min));
  }
  if (value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", text, ": must be at most ", max));
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

absl::StatusOr<std::string> ParsedFlags::FileContents(
    absl::string_view name) const {
  return ReadFlagFile(name, String(name), kMaxFlagFileBytes);
}

absl::StatusOr<std::vector<std::string>> ParsedFlags::StringList(
    absl::string_view name) const {
  const std::string text = String(name);
  std::vector<std::string> items;
  for (absl::string_view item :
       absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    items.emplace_back(absl::StripAsciiWhitespace(item));
  }
  if (items.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, "=", text, ": must list at least one item, e.g. a,b"));
  }
  return items;
}

absl::StatusOr<std::string> ParsedFlags::Choice(
    absl::string_view name, absl::Span<const std::string> choices) const {
  std::string text = String(name);
  if (std::find(choices.begin(), choices.end(), text) == choices.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", text, ": must be one of ",
                     absl::StrJoin(choices, ", ")));
  }
  return text;
}

absl::StatusOr<ParsedFlags> ParseFlags(int argc, const char* const* argv,
                                       absl::Span<const FlagSpec> table) {
  return ParseFlags(argc, argv, table, ParseOptions());
}

absl::StatusOr<ParsedFlags> ParseFlags(int argc, const char* const* argv,
                                       absl::Span<const FlagSpec> table,
                                       const ParseOptions& options) {
  ParsedFlags parsed(table);
  for (int i = 1; i < argc; ++i) {
    const absl::string_view argument = argv[i];
    if (IsHelp(argument)) {
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
    } else if (i + 1 < argc && !absl::StartsWith(argv[i + 1], "--")) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " needs a value: --", name, "=", flag->value_name));
    }
    if (options.repeated_flags == RepeatedFlags::kError &&
        parsed.values_.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " is given more than once; give each flag once"));
    }
    parsed.values_[std::string(name)] = std::move(value);
  }
  return parsed;
}

std::vector<FlagSpec> ConcatFlagTables(
    std::initializer_list<absl::Span<const FlagSpec>> tables) {
  std::vector<FlagSpec> all;
  for (absl::Span<const FlagSpec> table : tables) {
    all.insert(all.end(), table.begin(), table.end());
  }
  return all;
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

absl::StatusOr<ParsedSubcommand> ParseSubcommand(
    absl::string_view program, int argc, const char* const* argv,
    absl::Span<const SubcommandSpec> subcommands, const ParseOptions& options) {
  const auto find = [&](absl::string_view name) -> const SubcommandSpec* {
    for (const SubcommandSpec& subcommand : subcommands) {
      if (name == subcommand.name) return &subcommand;
    }
    return nullptr;
  };
  // The parsed flags of a help request: only help() is asked of them.
  const auto help = [&](const SubcommandSpec* subcommand)
      -> absl::StatusOr<ParsedSubcommand> {
    const char* const help_argv[] = {"", "--help"};
    absl::StatusOr<ParsedFlags> flags =
        ParseFlags(2, help_argv,
                   subcommand != nullptr ? subcommand->flags
                                         : absl::Span<const FlagSpec>());
    if (!flags.ok()) return flags.status();
    return ParsedSubcommand{subcommand, *std::move(flags)};
  };
  std::vector<std::string> names;
  for (const SubcommandSpec& subcommand : subcommands) {
    names.push_back(subcommand.name);
  }
  const std::string choices =
      absl::StrCat("; subcommands: ", absl::StrJoin(names, ", "), " (run `",
                   program, " --help` or `", program, " SUBCOMMAND --help`)");
  if (argc < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("no subcommand given", choices));
  }
  const absl::string_view first = argv[1];
  if (IsHelp(first) || first == "help") {
    return help(argc > 2 ? find(argv[2]) : nullptr);
  }
  const SubcommandSpec* subcommand = find(first);
  if (subcommand == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        absl::StartsWith(first, "-")
            ? absl::StrCat("expected a subcommand before '", first, "'")
            : absl::StrCat("unknown subcommand '", first, "'"),
        choices));
  }
  for (int i = 2; i < argc; ++i) {
    if (IsHelp(argv[i])) return help(subcommand);
  }
  absl::StatusOr<ParsedFlags> flags =
      ParseFlags(argc - 1, argv + 1, subcommand->flags, options);
  if (!flags.ok()) {
    const absl::string_view message = flags.status().message();
    return absl::InvalidArgumentError(absl::StartsWith(message, "--")
                                          ? absl::StrCat("flag ", message)
                                          : std::string(message));
  }
  return ParsedSubcommand{subcommand, *std::move(flags)};
}

std::string SubcommandsUsage(absl::string_view program,
                             absl::string_view summary,
                             absl::Span<const SubcommandSpec> subcommands) {
  size_t width = 0;
  for (const SubcommandSpec& subcommand : subcommands) {
    width = std::max(width, absl::string_view(subcommand.name).size());
  }
  std::string usage = absl::StrCat(summary, "\n\nUsage: ", program,
                                   " SUBCOMMAND [--flag=value ...]\n\n"
                                   "Subcommands:\n");
  for (const SubcommandSpec& subcommand : subcommands) {
    const absl::string_view name = subcommand.name;
    absl::StrAppend(&usage, "  ", name,
                    std::string(width - name.size() + 2, ' '),
                    subcommand.summary, "\n");
  }
  absl::StrAppend(&usage, "\nRun `", program,
                  " SUBCOMMAND --help` for its flags.\n");
  return usage;
}

std::string SubcommandUsage(absl::string_view program,
                            const SubcommandSpec& subcommand) {
  constexpr size_t kWidth = 79;
  std::string usage = absl::StrCat(
      "Usage: ", program, " ", subcommand.name, " [flags]\n\n",
      Wrap(subcommand.description, kWidth, /*start_column=*/0, /*indent=*/0),
      "\n\nFlags (--name=value or --name value):\n");
  std::vector<std::pair<std::string, std::string>> lines;
  size_t width = 0;
  for (const FlagSpec& flag : subcommand.flags) {
    std::string help = flag.help;
    if (flag.default_value[0] != '\0') {
      absl::StrAppend(&help, " (default ", flag.default_value, ")");
    }
    lines.emplace_back(Label(flag), std::move(help));
    width = std::max(width, lines.back().first.size());
  }
  lines.emplace_back("--help", "print this help and exit");
  width = std::max(width, lines.back().first.size());
  for (const auto& [label, help] : lines) {
    const std::string head =
        absl::StrCat("  ", label, std::string(width - label.size() + 2, ' '));
    absl::StrAppend(&usage, head,
                    Wrap(help, kWidth, /*start_column=*/head.size(),
                         /*indent=*/head.size()),
                    "\n");
  }
  return usage;
}

absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag,
                                         const std::string& path,
                                         int64_t max_bytes) {
  struct stat info;
  if (stat(path.c_str(), &info) == 0) {
    if (!S_ISREG(info.st_mode) && !S_ISFIFO(info.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, "=", path,
          " is not a regular file (a directory or a device); give the path "
          "of a file"));
    }
    if (S_ISREG(info.st_mode) && info.st_size > max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, "=", path, " is ", info.st_size,
          " bytes, more than the ", max_bytes,
          " such a file may hold; is it the right file?"));
    }
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": cannot read the file"));
  }
  std::string contents;
  char buffer[64 * 1024];
  while (file) {
    file.read(buffer, sizeof(buffer));
    contents.append(buffer, static_cast<size_t>(file.gcount()));
    if (static_cast<int64_t>(contents.size()) > max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, "=", path, " holds more than the ", max_bytes,
          " bytes such a file may hold; is it the right file?"));
    }
  }
  return contents;
}

}  // namespace dcp
