#include "common/main_prologue.h"

#include <algorithm>
#include <iostream>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace dcp {
namespace {

std::string OneLine(absl::string_view message) {
  std::string line(message);
  std::replace(line.begin(), line.end(), '\n', ' ');
  return line;
}

}  // namespace

int PrintUsageError(std::ostream& err, absl::string_view prefix,
                    absl::string_view message, absl::string_view help_command) {
  err << prefix << ": " << OneLine(message);
  if (!help_command.empty()) {
    err << " (run `" << help_command << " --help` for usage)";
  }
  err << "\n" << std::flush;
  return kExitUsageError;
}

int PrintFailure(std::ostream& err, absl::string_view prefix,
                 absl::string_view message) {
  err << prefix << ": " << OneLine(message) << "\n" << std::flush;
  return kExitFailure;
}

MainStart StartMain(const ProgramSpec& program, int argc,
                    const char* const* argv, std::ostream& out,
                    std::ostream& err) {
  absl::StatusOr<ParsedFlags> flags =
      ParseFlags(argc, argv, program.flags, program.parse_options);
  MainStart start;
  if (!flags.ok()) {
    start.exit_code =
        PrintUsageError(err, program.name, flags.status().message());
    return start;
  }
  if (flags->help()) {
    out << Usage(program.name, program.summary, program.flags, program.epilogue)
        << std::flush;
    return start;
  }
  start.flags = *std::move(flags);
  return start;
}

MainStart StartMain(const ProgramSpec& program, int argc,
                    const char* const* argv) {
  return StartMain(program, argc, argv, std::cout, std::cerr);
}

SubcommandMainStart StartSubcommandMain(const SubcommandProgramSpec& program,
                                        int argc, const char* const* argv,
                                        std::ostream& out, std::ostream& err) {
  SubcommandMainStart start;
  if (argc < 2) {
    err << SubcommandsUsage(program.name, program.summary, program.subcommands)
        << std::flush;
    start.exit_code = kExitUsageError;
    return start;
  }
  absl::StatusOr<ParsedSubcommand> parsed = ParseSubcommand(
      program.name, argc, argv, program.subcommands, program.parse_options);
  if (!parsed.ok()) {
    // A known subcommand's flags were wrong: point at its help.
    for (const SubcommandSpec& subcommand : program.subcommands) {
      if (argv[1] == absl::string_view(subcommand.name)) {
        const std::string command =
            absl::StrCat(program.name, " ", subcommand.name);
        start.exit_code = PrintUsageError(
            err, command,
            // The hint names the subcommand's help, so the
            // parser's own "(see --help)" goes.
            absl::StripSuffix(parsed.status().message(), " (see --help)"),
            command);
        return start;
      }
    }
    start.exit_code =
        PrintUsageError(err, program.name, parsed.status().message());
    return start;
  }
  if (parsed->help()) {
    out << (parsed->subcommand != nullptr
                ? SubcommandUsage(program.name, *parsed->subcommand)
                : SubcommandsUsage(program.name, program.summary,
                                   program.subcommands))
        << std::flush;
    return start;
  }
  start.subcommand = parsed->subcommand;
  start.flags = std::move(parsed->flags);
  return start;
}

}  // namespace dcp
