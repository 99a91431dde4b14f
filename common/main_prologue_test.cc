#include "common/main_prologue.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/command_line.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr FlagSpec kFlags[] = {
    {"nodes", "N", "1", "nodes in the job"},
    {"name", "NAME", "", "a name"},
};

ProgramSpec Program() {
  return {"thing", "thing: does things.", kFlags, "Exit codes: 0, 1, 2.\n"};
}

struct Outcome {
  MainStart start;
  std::string out;
  std::string err;
};

Outcome Start(const ProgramSpec& program, std::vector<const char*> arguments) {
  arguments.insert(arguments.begin(), "/path/to/thing");
  std::ostringstream out;
  std::ostringstream err;
  MainStart start = StartMain(program, static_cast<int>(arguments.size()),
                              arguments.data(), out, err);
  return {std::move(start), out.str(), err.str()};
}

TEST(StartMainTest, RunsWithTheFlags) {
  const Outcome outcome = Start(Program(), {"--nodes=3", "--name", "x"});
  ASSERT_TRUE(outcome.start.flags.has_value()) << outcome.err;
  EXPECT_EQ(outcome.start.exit_code, kExitOk);
  EXPECT_EQ(*outcome.start.flags->Int("nodes"), 3);
  EXPECT_EQ(outcome.start.flags->String("name"), "x");
  EXPECT_EQ(outcome.out, "");
  EXPECT_EQ(outcome.err, "");
}

TEST(StartMainTest, HelpPrintsUsageToOutAndExitsZero) {
  for (const char* help : {"--help", "-h"}) {
    const Outcome outcome = Start(Program(), {"--nodes=2", help});
    EXPECT_FALSE(outcome.start.flags.has_value());
    EXPECT_EQ(outcome.start.exit_code, kExitOk);
    EXPECT_EQ(outcome.out, Usage("thing", "thing: does things.", kFlags,
                                 "Exit codes: 0, 1, 2.\n"));
    EXPECT_THAT(outcome.out, HasSubstr("Usage: thing [--flag=value ...]"));
    EXPECT_EQ(outcome.err, "");
  }
}

TEST(StartMainTest, UsageErrorIsOneLineOnErrAndExitsTwo) {
  const Outcome outcome = Start(Program(), {"--bogus=1"});
  EXPECT_FALSE(outcome.start.flags.has_value());
  EXPECT_EQ(outcome.start.exit_code, kExitUsageError);
  EXPECT_EQ(outcome.err, "thing: unknown flag --bogus (see --help)\n");
  EXPECT_EQ(outcome.out, "");
}

TEST(StartMainTest, RepeatedFlagIsAUsageErrorUnlessAllowed) {
  const Outcome repeated = Start(Program(), {"--nodes=1", "--nodes=2"});
  EXPECT_EQ(repeated.start.exit_code, kExitUsageError);
  EXPECT_EQ(repeated.err,
            "thing: --nodes is given more than once; give each flag once\n");

  ProgramSpec last_wins = Program();
  last_wins.parse_options.repeated_flags = RepeatedFlags::kLastWins;
  const Outcome allowed = Start(last_wins, {"--nodes=1", "--nodes=2"});
  ASSERT_TRUE(allowed.start.flags.has_value()) << allowed.err;
  EXPECT_EQ(*allowed.start.flags->Int("nodes"), 2);
}

TEST(PrintTest, UsageErrorAndFailureAreOneLine) {
  std::ostringstream err;
  EXPECT_EQ(PrintUsageError(err, "dcp plan", "bad\nvalue", "dcp plan"),
            kExitUsageError);
  EXPECT_EQ(err.str(),
            "dcp plan: bad value (run `dcp plan --help` for usage)\n");
  err.str("");
  EXPECT_EQ(PrintUsageError(err, "thing", "bad"), kExitUsageError);
  EXPECT_EQ(err.str(), "thing: bad\n");
  err.str("");
  EXPECT_EQ(PrintFailure(err, "dcp plan", "it\nfailed"), kExitFailure);
  EXPECT_EQ(err.str(), "dcp plan: it failed\n");
}

constexpr FlagSpec kRunFlags[] = {{"steps", "K", "20", "steps to run"}};
constexpr SubcommandSpec kSubcommands[] = {
    {"run", "run it", "Runs it.", kRunFlags},
    {"check", "check it", "Checks it.", {}},
};

struct SubcommandOutcome {
  SubcommandMainStart start;
  std::string out;
  std::string err;
};

SubcommandOutcome StartTool(std::vector<const char*> arguments) {
  arguments.insert(arguments.begin(), "tool");
  std::ostringstream out;
  std::ostringstream err;
  const SubcommandProgramSpec program = {"tool", "tool: a tool.", kSubcommands};
  SubcommandMainStart start = StartSubcommandMain(
      program, static_cast<int>(arguments.size()), arguments.data(), out, err);
  return {std::move(start), out.str(), err.str()};
}

TEST(StartSubcommandMainTest, DispatchesWithTheSubcommandsFlags) {
  const SubcommandOutcome outcome = StartTool({"run", "--steps=3"});
  ASSERT_TRUE(outcome.start.flags.has_value()) << outcome.err;
  EXPECT_EQ(outcome.start.subcommand, &kSubcommands[0]);
  EXPECT_EQ(*outcome.start.flags->Int("steps"), 3);
  EXPECT_EQ(outcome.err, "");
}

TEST(StartSubcommandMainTest, NoArgumentsPrintsTheUsageToErr) {
  const SubcommandOutcome outcome = StartTool({});
  EXPECT_FALSE(outcome.start.flags.has_value());
  EXPECT_EQ(outcome.start.exit_code, kExitUsageError);
  EXPECT_EQ(outcome.err,
            SubcommandsUsage("tool", "tool: a tool.", kSubcommands));
  EXPECT_EQ(outcome.out, "");
}

TEST(StartSubcommandMainTest, HelpGoesToOut) {
  const SubcommandOutcome program = StartTool({"help"});
  EXPECT_EQ(program.start.exit_code, kExitOk);
  EXPECT_FALSE(program.start.flags.has_value());
  EXPECT_THAT(program.out, HasSubstr("Usage: tool SUBCOMMAND"));
  const SubcommandOutcome run = StartTool({"run", "--steps=x", "--help"});
  EXPECT_EQ(run.start.exit_code, kExitOk);
  EXPECT_EQ(run.out, SubcommandUsage("tool", kSubcommands[0]));
  EXPECT_EQ(StartTool({"help", "run"}).out, run.out);
  EXPECT_EQ(run.err, "");
}

TEST(StartSubcommandMainTest, ErrorsAreOneLineNamingWhatToRun) {
  const SubcommandOutcome unknown = StartTool({"rn"});
  EXPECT_EQ(unknown.start.exit_code, kExitUsageError);
  EXPECT_THAT(unknown.err, StartsWith("tool: unknown subcommand 'rn'"));
  EXPECT_THAT(unknown.err, HasSubstr("tool SUBCOMMAND --help"));
  const SubcommandOutcome flag = StartTool({"run", "--steps=1", "--steps=2"});
  EXPECT_EQ(flag.start.exit_code, kExitUsageError);
  EXPECT_EQ(flag.err,
            "tool run: flag --steps is given more than once; give each flag "
            "once (run `tool run --help` for usage)\n");
  EXPECT_EQ(StartTool({"check", "--steps=1"}).err,
            "tool check: unknown flag --steps (run `tool check --help` for "
            "usage)\n");
}

}  // namespace
}  // namespace dcp
