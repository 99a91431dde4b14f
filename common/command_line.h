#ifndef DCP_COMMON_COMMAND_LINE_H_
#define DCP_COMMON_COMMAND_LINE_H_

// The command lines of DCP's binaries: a table of flags, parsing of
// `--name=value`, `--name value` and bare boolean `--name`, typed getters with
// ranges and K/M suffixes, subcommands (`dcp simulate --steps=3`), and aligned
// usage text.

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace dcp {

/// One flag of a binary's command line. Tables of these are `constexpr`
/// arrays that outlive every `ParsedFlags` parsed against them.
struct FlagSpec {
  /// The name without the leading "--", e.g. "gpus-per-node".
  const char* name;
  /// What the value is, for the usage text (e.g. "HOST:PORT"); nullptr for a
  /// boolean flag, which may be given bare (`--resume` means true).
  const char* value_name;
  /// The value when the flag is not given, as text; "" for none.
  const char* default_value;
  /// One line of help for the usage text.
  const char* help;
};

/// What ParseFlags does with a flag given more than once.
enum class RepeatedFlags {
  /// The last value counts (`--nodes=2 --nodes=3` means 3).
  kLastWins,
  /// INVALID_ARGUMENT naming the flag: "--nodes is given more than once;
  /// give each flag once".
  kError,
};

/// How ParseFlags reads a command line.
struct ParseOptions {
  RepeatedFlags repeated_flags = RepeatedFlags::kLastWins;
};

/// The flags given on a command line, with typed access that falls back to
/// the table's defaults. Every getter's error names the flag, the value and
/// what was expected, e.g. "--nodes=abc: expected an integer in [1, 64]".
/// Asking for a name missing from the table is a programming error and
/// aborts. Not thread-safe to mutate; const access is thread-compatible.
class ParsedFlags {
 public:
  /// True when `--help` or `-h` was given.
  bool help() const { return help_; }

  /// True when the flag was given (with any value).
  bool Given(absl::string_view name) const;

  /// The flag's value as given, else its default.
  std::string String(absl::string_view name) const;

  /// true/false/1/0 (also yes/no), case-insensitive.
  absl::StatusOr<bool> Bool(absl::string_view name) const;

  /// A base-10 integer in [min, max].
  absl::StatusOr<int64_t> Int(
      absl::string_view name, int64_t min = std::numeric_limits<int64_t>::min(),
      int64_t max = std::numeric_limits<int64_t>::max()) const;

  /// A base-10 integer with an optional K (x 1024) or M (x 1048576) suffix,
  /// either case ("64K", "2m"), in [min, max]. Errors: "--nodes=abc: is not
  /// an integer (K and M suffixes allowed)", "--nodes=0: must be at least 1",
  /// "... must be at most 64", "--tokens=9999999999999M: is too large".
  absl::StatusOr<int64_t> IntWithSuffix(
      absl::string_view name, int64_t min = std::numeric_limits<int64_t>::min(),
      int64_t max = std::numeric_limits<int64_t>::max()) const;

  /// A base-10 integer in [min, max] that fits an `int`.
  absl::StatusOr<int> Int32(absl::string_view name,
                            int min = std::numeric_limits<int>::min(),
                            int max = std::numeric_limits<int>::max()) const;

  /// A non-negative integer up to 2^64 - 1 (seeds).
  absl::StatusOr<uint64_t> Uint64(absl::string_view name) const;

  /// A number in [min, max], or in (min, max] when `min_exclusive`.
  absl::StatusOr<double> Double(
      absl::string_view name,
      double min = -std::numeric_limits<double>::infinity(),
      double max = std::numeric_limits<double>::infinity(),
      bool min_exclusive = false) const;

  /// A positive duration in absl::ParseDuration's syntax ("30s", "2m").
  absl::StatusOr<absl::Duration> Duration(absl::string_view name) const;

  /// Comma-separated integers, each in [min, max], e.g. "8,16,256".
  absl::StatusOr<std::vector<int64_t>> IntList(
      absl::string_view name, int64_t min = 1,
      int64_t max = std::numeric_limits<int64_t>::max()) const;

  /// The contents of the file the flag names (its value, else its default):
  /// INVALID_ARGUMENT "--cluster=PATH: cannot read the file" when it cannot be
  /// opened.
  /// Reads at most kMaxFlagFileBytes, through ReadFlagFile().
  absl::StatusOr<std::string> FileContents(absl::string_view name) const;

  /// Comma-separated words, whitespace around each removed and empty items
  /// skipped; at least one ("--strategies=: must list at least one item, e.g.
  /// a,b").
  absl::StatusOr<std::vector<std::string>> StringList(
      absl::string_view name) const;

  /// The value if it is one of `choices`, else "--format=xml: must be one of
  /// table, json".
  absl::StatusOr<std::string> Choice(
      absl::string_view name, absl::Span<const std::string> choices) const;

 private:
  friend absl::StatusOr<ParsedFlags> ParseFlags(
      int argc, const char* const* argv, absl::Span<const FlagSpec> table,
      const ParseOptions& options);

  explicit ParsedFlags(absl::Span<const FlagSpec> table) : table_(table) {}

  const FlagSpec& Find(absl::string_view name) const;

  absl::Span<const FlagSpec> table_;
  /// The flags given, by name; a flag given twice (with
  /// RepeatedFlags::kLastWins) keeps its last value.
  absl::flat_hash_map<std::string, std::string> values_;
  bool help_ = false;
};

/// Parses argv[1..argc) against `table`: `--name=value`, `--name value`, a
/// bare `--name` for a boolean flag, and `--help`/`-h`. Returns an
/// InvalidArgument error for an unknown flag ("unknown flag --x (see
/// --help)"), a missing value ("--nodes needs a value: --nodes=N"; in
/// `--name value` form a next argument starting with "--" is not taken as the
/// value), an argument that is not a flag, or (with RepeatedFlags::kError) a
/// flag given twice. Values are checked only by the typed getters.
absl::StatusOr<ParsedFlags> ParseFlags(int argc, const char* const* argv,
                                       absl::Span<const FlagSpec> table,
                                       const ParseOptions& options);
/// ParseFlags with the default ParseOptions (the last of repeated flags
/// wins).
absl::StatusOr<ParsedFlags> ParseFlags(int argc, const char* const* argv,
                                       absl::Span<const FlagSpec> table);

/// The flags of `tables` in order, one table (e.g. a binary's own flags and
/// shared ones such as ModelClusterFlags::specs()). The FlagSpecs' strings
/// still belong to the tables' owners.
std::vector<FlagSpec> ConcatFlagTables(
    std::initializer_list<absl::Span<const FlagSpec>> tables);

/// The usage text: `summary`, "Usage: PROGRAM [--flag=value ...]", one
/// aligned line per flag ("--name=VALUE" or "--name[=true|false]", its help
/// and "(default X)" when it has one), `--help`, then `epilogue` (if any)
/// after a blank line. `summary` and `epilogue` are printed as given.
std::string Usage(absl::string_view program, absl::string_view summary,
                  absl::Span<const FlagSpec> table, absl::string_view epilogue);

/// One subcommand of a program such as `dcp simulate`: its name, flags and
/// help. Tables of these outlive every ParsedSubcommand parsed against them.
struct SubcommandSpec {
  /// The word after the program name, e.g. "simulate".
  const char* name;
  /// One line for the program's usage text.
  const char* summary;
  /// A paragraph for the subcommand's usage text (wrapped at 79 columns).
  const char* description;
  /// The subcommand's flags.
  absl::Span<const FlagSpec> flags;
};

/// A parsed `PROGRAM SUBCOMMAND [flags]` command line.
struct ParsedSubcommand {
  /// The subcommand given; nullptr when the program's own help was asked for
  /// (`PROGRAM --help`, `-h`, `help`, or `help` with an unknown name).
  const SubcommandSpec* subcommand;
  /// The subcommand's flags. help() is true when help was asked for: `--help`
  /// or `-h` anywhere after the subcommand (even after a wrong flag), or
  /// `PROGRAM help SUBCOMMAND`.
  ParsedFlags flags;

  bool help() const { return flags.help(); }
};

/// Parses argv (argv[0] the program, argv[1] the subcommand, then its flags
/// as ParseFlags does with `options`). INVALID_ARGUMENT for no subcommand
/// ("no subcommand given; subcommands: a, b ..."), an unknown one
/// ("unknown subcommand 'simulat'; subcommands: simulate, plan, validate (run
/// `dcp --help` or `dcp SUBCOMMAND --help`)"), a flag before the subcommand
/// ("expected a subcommand before '--nodes=2'; ..."), and for ParseFlags'
/// errors, where a message about one flag reads "flag --nodes needs a value:
/// --nodes=N". `program` names the program in these messages.
absl::StatusOr<ParsedSubcommand> ParseSubcommand(
    absl::string_view program, int argc, const char* const* argv,
    absl::Span<const SubcommandSpec> subcommands, const ParseOptions& options);

/// The program's usage text: `summary`, "Usage: PROGRAM SUBCOMMAND
/// [--flag=value ...]", one line per subcommand with its summary, and a
/// pointer to `PROGRAM SUBCOMMAND --help`.
std::string SubcommandsUsage(absl::string_view program,
                             absl::string_view summary,
                             absl::Span<const SubcommandSpec> subcommands);

/// One subcommand's usage text: "Usage: PROGRAM NAME [flags]", its
/// description, then one line per flag (help and "(default X)" wrapped at 79
/// columns) and `--help`.
std::string SubcommandUsage(absl::string_view program,
                            const SubcommandSpec& subcommand);

/// The most a file named by a flag may hold for ParsedFlags::FileContents.
inline constexpr int64_t kMaxFlagFileBytes = int64_t{256} << 20;

/// The contents of the file at `path`, which flag `--flag` names, read
/// without ever holding more than `max_bytes`: INVALID_ARGUMENT naming the
/// flag when the path is a directory or a device (--model=/dev/zero), when
/// a regular file is larger than `max_bytes` (checked before reading), or
/// when a pipe yields more; "cannot read the file" when it cannot be opened.
absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag,
                                         const std::string& path,
                                         int64_t max_bytes);

}  // namespace dcp

#endif  // DCP_COMMON_COMMAND_LINE_H_
