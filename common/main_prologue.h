#ifndef DCP_COMMON_MAIN_PROLOGUE_H_
#define DCP_COMMON_MAIN_PROLOGUE_H_

// The one start-up of DCP's binaries (dcp, dcp_planner, and for the worker
// helper to adopt: dcp_worker, dcp_local_job, planner_load_test): parse the
// command line, print --help to stdout and exit 0, print a usage error as one
// line "PROGRAM: message" to stderr and exit 2. The same exit codes
// everywhere: 0 ok, 1 the work failed, 2 usage error.
//
// A flag binary (see planner/service/planner_main_lib.cc):
//
//   int RunThingMain(int argc, char** argv) {
//     const MainStart start = StartMain(ThingProgram(), argc, argv);
//     if (!start.flags.has_value()) return start.exit_code;  // help or error
//     const ParsedFlags& flags = *start.flags;
//     absl::StatusOr<Config> config = Configure(flags);
//     if (!config.ok()) return PrintUsageError(std::cerr, "thing",
//                                              config.status().message());
//     ...
//   }
//
// where ThingProgram() returns a ProgramSpec with static lifetime flags
// (e.g. ConcatFlagTables({kOwnFlags, ModelCluster().specs()}), see
// cost_model/model_cluster_flags.h).
//
// A subcommand binary (see planner/cli/cli.cc): StartSubcommandMain, then
// dispatch on `start.subcommand->name`.

#include <optional>
#include <ostream>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/command_line.h"

namespace dcp {

/// Exit codes of every DCP binary.
inline constexpr int kExitOk = 0;
/// The work failed (a planning error, a failed run, an unreachable peer).
inline constexpr int kExitFailure = 1;
/// The command line was wrong (unknown flag, bad value, unreadable file).
inline constexpr int kExitUsageError = 2;

/// A flag binary's command line, as StartMain parses it and --help shows it.
struct ProgramSpec {
  /// "dcp_planner": the program in the usage text and the prefix of error
  /// lines.
  const char* name;
  /// The first paragraph of --help.
  std::string summary;
  /// The flags; must outlive the ParsedFlags StartMain returns.
  absl::Span<const FlagSpec> flags;
  /// Printed after the flags (exit codes, signals); may be empty.
  std::string epilogue;
  /// A repeated flag is a usage error naming it, unless set otherwise.
  ParseOptions parse_options = {RepeatedFlags::kError};
};

/// What main does after the prologue: run with `flags`, or (when `flags` is
/// empty) return `exit_code` at once.
struct MainStart {
  std::optional<ParsedFlags> flags;
  /// kExitOk after --help was printed, kExitUsageError after a usage error
  /// was printed; kExitOk when `flags` is set.
  int exit_code = kExitOk;
};

/// Parses argv against `program.flags` (argv[0] is ignored): `--help`/`-h`
/// prints Usage(program...) to `out` (flushed) and returns {nullopt,
/// kExitOk}; a parse error prints "NAME: message" to `err` and returns
/// {nullopt, kExitUsageError}. Values are checked later by the typed getters
/// (report their errors with PrintUsageError).
MainStart StartMain(const ProgramSpec& program, int argc,
                    const char* const* argv, std::ostream& out,
                    std::ostream& err);
/// StartMain on std::cout and std::cerr.
MainStart StartMain(const ProgramSpec& program, int argc,
                    const char* const* argv);

/// A subcommand binary's command line (`dcp simulate --steps=3`).
struct SubcommandProgramSpec {
  /// "dcp": the program in usage texts and the prefix of error lines.
  const char* name;
  /// The first paragraph of the program's --help.
  std::string summary;
  /// Must outlive the ParsedFlags StartSubcommandMain returns.
  absl::Span<const SubcommandSpec> subcommands;
  ParseOptions parse_options = {RepeatedFlags::kError};
};

/// What main does after StartSubcommandMain: run `subcommand` with `flags`,
/// or (when `flags` is empty) return `exit_code` at once.
struct SubcommandMainStart {
  /// Set exactly when `flags` is.
  const SubcommandSpec* subcommand = nullptr;
  std::optional<ParsedFlags> flags;
  int exit_code = kExitOk;
};

/// Parses argv with ParseSubcommand. No arguments: the program's usage to
/// `err`, kExitUsageError. Help (`--help`, `-h`, `help [SUBCOMMAND]`, or
/// `--help` anywhere after a subcommand): the usage to `out`, kExitOk. An
/// unknown subcommand: "NAME: unknown subcommand ..." to `err`; a flag error
/// of a known subcommand: PrintUsageError(err, "NAME SUBCOMMAND", message,
/// "NAME SUBCOMMAND"); both kExitUsageError.
SubcommandMainStart StartSubcommandMain(const SubcommandProgramSpec& program,
                                        int argc, const char* const* argv,
                                        std::ostream& out, std::ostream& err);

/// Prints "PREFIX: MESSAGE" as one line to `err` (newlines in MESSAGE become
/// spaces), followed by " (run `HELP_COMMAND --help` for usage)" when
/// `help_command` is not empty; returns kExitUsageError.
int PrintUsageError(std::ostream& err, absl::string_view prefix,
                    absl::string_view message,
                    absl::string_view help_command = "");

/// Prints "PREFIX: MESSAGE" as one line to `err`; returns kExitFailure.
int PrintFailure(std::ostream& err, absl::string_view prefix,
                 absl::string_view message);

}  // namespace dcp

#endif  // DCP_COMMON_MAIN_PROLOGUE_H_
