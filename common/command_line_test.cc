#include "common/command_line.h"

#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr FlagSpec kTable[] = {
    {"nodes", "N", "1", "nodes in the job"},
    {"name", "NAME", "", "a name"},
    {"fraction", "F", "0.8", "fraction of memory"},
    {"timeout", "DURATION", "60s", "how long to wait"},
    {"lengths", "N,N,...", "8,16", "sequence lengths"},
    {"resume", nullptr, "false", "continue from a checkpoint"},
};

absl::StatusOr<ParsedFlags> Parse(std::vector<const char*> arguments) {
  arguments.insert(arguments.begin(), "program");
  return ParseFlags(static_cast<int>(arguments.size()), arguments.data(),
                    kTable);
}

TEST(CommandLineTest, DefaultsWhenNotGiven) {
  absl::StatusOr<ParsedFlags> flags = Parse({});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_FALSE(flags->help());
  EXPECT_FALSE(flags->Given("nodes"));
  EXPECT_EQ(*flags->Int("nodes", 1, 64), 1);
  EXPECT_EQ(flags->String("name"), "");
  EXPECT_DOUBLE_EQ(*flags->Double("fraction", 0, 1, /*min_exclusive=*/true),
                   0.8);
  EXPECT_EQ(*flags->Duration("timeout"), absl::Seconds(60));
  EXPECT_THAT(*flags->IntList("lengths"), ElementsAre(8, 16));
  EXPECT_FALSE(*flags->Bool("resume"));
}

TEST(CommandLineTest, EqualsAndSeparateValueForms) {
  absl::StatusOr<ParsedFlags> flags =
      Parse({"--nodes=4", "--name", "alice", "--timeout=2m"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_TRUE(flags->Given("nodes"));
  EXPECT_TRUE(flags->Given("name"));
  EXPECT_FALSE(flags->Given("fraction"));
  EXPECT_EQ(*flags->Int("nodes", 1, 64), 4);
  EXPECT_EQ(*flags->Int32("nodes", 1, 64), 4);
  EXPECT_EQ(flags->String("name"), "alice");
  EXPECT_EQ(*flags->Duration("timeout"), absl::Minutes(2));
}

TEST(CommandLineTest, EmptyValueAfterEqualsIsGiven) {
  absl::StatusOr<ParsedFlags> flags = Parse({"--name="});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_TRUE(flags->Given("name"));
  EXPECT_EQ(flags->String("name"), "");
}

TEST(CommandLineTest, LastValueWins) {
  absl::StatusOr<ParsedFlags> flags = Parse({"--nodes=2", "--nodes=3"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(*flags->Int("nodes"), 3);
}

TEST(CommandLineTest, RepeatedFlagIsAnErrorNamingItWhenAsked) {
  const char* arguments[] = {"program", "--name=a", "--nodes=2", "--nodes=3"};
  absl::StatusOr<ParsedFlags> flags =
      ParseFlags(4, arguments, kTable, {RepeatedFlags::kError});
  EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(flags.status().message(),
            "--nodes is given more than once; give each flag once");
  // Each flag once is fine; so is the last-wins default.
  EXPECT_TRUE(ParseFlags(3, arguments, kTable, {RepeatedFlags::kError}).ok());
  EXPECT_EQ(*ParseFlags(4, arguments, kTable)->Int("nodes"), 3);
}

TEST(CommandLineTest, SeparateValueIsNotTheNextFlag) {
  absl::StatusOr<ParsedFlags> flags = Parse({"--name", "--nodes=2"});
  EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(flags.status().message(), "--name needs a value: --name=NAME");
  // A negative number is a value.
  flags = Parse({"--nodes", "-3"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(*flags->Int("nodes"), -3);
}

TEST(CommandLineTest, IntWithSuffixes) {
  struct Case {
    const char* text;
    int64_t value;
  };
  for (const Case& c : {Case{"7", 7}, Case{"64K", 65536}, Case{"64k", 65536},
                        Case{"2M", 2097152}, Case{"2m", 2097152},
                        Case{"-1K", -1024}, Case{"0M", 0}}) {
    const std::string argument = absl::StrCat("--nodes=", c.text);
    absl::StatusOr<ParsedFlags> flags = Parse({argument.c_str()});
    ASSERT_TRUE(flags.ok()) << c.text;
    absl::StatusOr<int64_t> value = flags->IntWithSuffix("nodes");
    ASSERT_TRUE(value.ok()) << c.text << ": " << value.status();
    EXPECT_EQ(*value, c.value) << c.text;
  }
  // The default is parsed the same way.
  EXPECT_EQ(*Parse({})->IntWithSuffix("nodes", 1, 64), 1);
}

TEST(CommandLineTest, IntWithSuffixErrorsNameTheFlag) {
  struct Case {
    const char* argument;
    const char* message;
  };
  for (const Case& c : {
           Case{"--nodes=abc",
                "--nodes=abc: is not an integer (K and M "
                "suffixes allowed)"},
           Case{"--nodes=4G",
                "--nodes=4G: is not an integer (K and M "
                "suffixes allowed)"},
           Case{"--nodes=K",
                "--nodes=K: is not an integer (K and M "
                "suffixes allowed)"},
           Case{"--nodes=1.5K",
                "--nodes=1.5K: is not an integer (K and M "
                "suffixes allowed)"},
           Case{"--nodes=0", "--nodes=0: must be at least 1"},
           Case{"--nodes=1K", "--nodes=1K: must be at most 64"},
           Case{"--nodes=9999999999999M",
                "--nodes=9999999999999M: is too large"},
       }) {
    absl::StatusOr<ParsedFlags> flags = Parse({c.argument});
    ASSERT_TRUE(flags.ok()) << c.argument;
    absl::StatusOr<int64_t> value = flags->IntWithSuffix("nodes", 1, 64);
    EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument)
        << c.argument;
    EXPECT_EQ(value.status().message(), c.message);
  }
}

TEST(CommandLineTest, StringListsAndChoices) {
  absl::StatusOr<ParsedFlags> flags = Parse({"--name= dcp , bucket,,"});
  ASSERT_TRUE(flags.ok());
  EXPECT_THAT(*flags->StringList("name"), ElementsAre("dcp", "bucket"));
  flags = Parse({"--name=,"});
  EXPECT_EQ(flags->StringList("name").status().message(),
            "--name=,: must list at least one item, e.g. a,b");

  const std::vector<std::string> formats = {"table", "json"};
  flags = Parse({"--name=json"});
  EXPECT_EQ(*flags->Choice("name", formats), "json");
  flags = Parse({"--name=xml"});
  EXPECT_EQ(flags->Choice("name", formats).status().message(),
            "--name=xml: must be one of table, json");
}

TEST(CommandLineTest, FileContentsNamesTheFlagWhenUnreadable) {
  const std::string path = TestTempPath("command_line_file");
  std::ofstream(path, std::ios::binary) << std::string("a\0b\n", 4);
  const std::string argument = "--name=" + path;
  absl::StatusOr<ParsedFlags> flags = Parse({argument.c_str()});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(*flags->FileContents("name"), std::string("a\0b\n", 4));

  std::ofstream(path, std::ios::binary | std::ios::trunc);
  EXPECT_EQ(*flags->FileContents("name"), "");

  flags = Parse({"--name=/no/such/file"});
  ASSERT_TRUE(flags.ok());
  absl::StatusOr<std::string> contents = flags->FileContents("name");
  EXPECT_EQ(contents.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(contents.status().message(),
            "--name=/no/such/file: cannot read the file");
}

TEST(CommandLineTest, ConcatFlagTablesKeepsOrder) {
  constexpr FlagSpec kMore[] = {{"extra", "X", "", "one more"}};
  const std::vector<FlagSpec> all = ConcatFlagTables({kTable, kMore});
  ASSERT_EQ(all.size(), 7u);
  EXPECT_STREQ(all[0].name, "nodes");
  EXPECT_STREQ(all[5].name, "resume");
  EXPECT_STREQ(all[6].name, "extra");
  const char* arguments[] = {"program", "--extra=1", "--nodes=2"};
  absl::StatusOr<ParsedFlags> flags = ParseFlags(3, arguments, all);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->String("extra"), "1");
}

constexpr FlagSpec kRunFlags[] = {
    {"steps", "K", "20", "global batches to simulate"},
    {"format", "table|json", "table", "output format"},
};
constexpr FlagSpec kCheckFlags[] = {
    {"plan", "FILE", "", "the plan JSON (required)"},
};
constexpr SubcommandSpec kSubcommands[] = {
    {"run", "run the thing", "Runs the thing for --steps steps.", kRunFlags},
    {"check", "check a file", "Checks the file given as --plan.", kCheckFlags},
};

absl::StatusOr<ParsedSubcommand> ParseCommand(
    std::vector<const char*> arguments) {
  arguments.insert(arguments.begin(), "tool");
  return ParseSubcommand("tool", static_cast<int>(arguments.size()),
                         arguments.data(), kSubcommands,
                         {RepeatedFlags::kError});
}

TEST(SubcommandTest, DispatchesToTheSubcommandsFlags) {
  absl::StatusOr<ParsedSubcommand> run =
      ParseCommand({"run", "--steps", "3", "--format=json"});
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_NE(run->subcommand, nullptr);
  EXPECT_STREQ(run->subcommand->name, "run");
  EXPECT_FALSE(run->help());
  EXPECT_EQ(*run->flags.Int("steps"), 3);
  EXPECT_EQ(run->flags.String("format"), "json");

  absl::StatusOr<ParsedSubcommand> check = ParseCommand({"check"});
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(check->subcommand, &kSubcommands[1]);
  EXPECT_FALSE(check->flags.Given("plan"));
}

TEST(SubcommandTest, AnotherSubcommandsFlagIsUnknown) {
  absl::StatusOr<ParsedSubcommand> parsed =
      ParseCommand({"check", "--steps=3"});
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(), "unknown flag --steps (see --help)");
}

TEST(SubcommandTest, FlagErrorsNameTheFlag) {
  EXPECT_EQ(ParseCommand({"run", "--steps=1", "--steps=2"}).status().message(),
            "flag --steps is given more than once; give each flag once");
  EXPECT_EQ(ParseCommand({"run", "--steps"}).status().message(),
            "flag --steps needs a value: --steps=K");
  EXPECT_THAT(std::string(ParseCommand({"run", "stray"}).status().message()),
              HasSubstr("unexpected argument 'stray'"));
}

TEST(SubcommandTest, UnknownOrMissingSubcommand) {
  absl::StatusOr<ParsedSubcommand> unknown = ParseCommand({"rn"});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(),
            "unknown subcommand 'rn'; subcommands: run, check (run `tool "
            "--help` or `tool SUBCOMMAND --help`)");
  EXPECT_THAT(std::string(ParseCommand({"--steps=2"}).status().message()),
              HasSubstr("expected a subcommand before '--steps=2'"));
  EXPECT_THAT(std::string(ParseCommand({}).status().message()),
              HasSubstr("no subcommand given; subcommands: run, check"));
}

TEST(SubcommandTest, HelpForms) {
  for (const char* help : {"--help", "-h", "help"}) {
    absl::StatusOr<ParsedSubcommand> parsed = ParseCommand({help});
    ASSERT_TRUE(parsed.ok()) << help;
    EXPECT_TRUE(parsed->help()) << help;
    EXPECT_EQ(parsed->subcommand, nullptr) << help;
  }
  absl::StatusOr<ParsedSubcommand> named = ParseCommand({"help", "check"});
  ASSERT_TRUE(named.ok());
  EXPECT_TRUE(named->help());
  EXPECT_EQ(named->subcommand, &kSubcommands[1]);
  EXPECT_EQ(ParseCommand({"help", "nothing"})->subcommand, nullptr);
  // Help after the subcommand wins over wrong flags.
  absl::StatusOr<ParsedSubcommand> wins =
      ParseCommand({"run", "--bogus", "--steps=1", "--steps=2", "-h"});
  ASSERT_TRUE(wins.ok()) << wins.status();
  EXPECT_TRUE(wins->help());
  EXPECT_EQ(wins->subcommand, &kSubcommands[0]);
}

TEST(SubcommandTest, UsageTexts) {
  const std::string program =
      SubcommandsUsage("tool", "tool: does things.", kSubcommands);
  EXPECT_EQ(program,
            "tool: does things.\n\nUsage: tool SUBCOMMAND [--flag=value "
            "...]\n\nSubcommands:\n  run    run the thing\n  check  check a "
            "file\n\nRun `tool SUBCOMMAND --help` for its flags.\n");
  const std::string run = SubcommandUsage("tool", kSubcommands[0]);
  EXPECT_EQ(run,
            "Usage: tool run [flags]\n\nRuns the thing for --steps "
            "steps.\n\nFlags (--name=value or --name value):\n"
            "  --steps=K            global batches to simulate (default 20)\n"
            "  --format=table|json  output format (default table)\n"
            "  --help               print this help and exit\n");
}

TEST(SubcommandTest, UsageWrapsLongHelpAtColumn79) {
  const std::string long_help(30, 'x');
  const std::string help =
      absl::StrCat(long_help, " ", long_help, " ", long_help);
  const FlagSpec flags[] = {{"a", "N", "", help.c_str()}};
  const SubcommandSpec subcommand = {"s", "", "d", flags};
  const std::string usage = SubcommandUsage("p", subcommand);
  // "  --a=N   " then two words on the first line, the third indented below.
  EXPECT_THAT(usage,
              HasSubstr(absl::StrCat("  --a=N   ", long_help, " ", long_help,
                                     "\n", "          ", long_help, "\n")));
  for (absl::string_view line : absl::StrSplit(usage, '\n')) {
    EXPECT_LE(line.size(), 79u) << line;
  }
}

TEST(CommandLineTest, BoolForms) {
  for (const char* argument : {"--resume", "--resume=true", "--resume=1",
                               "--resume=TRUE", "--resume=yes"}) {
    absl::StatusOr<ParsedFlags> flags = Parse({argument});
    ASSERT_TRUE(flags.ok()) << argument;
    EXPECT_TRUE(*flags->Bool("resume")) << argument;
  }
  for (const char* argument : {"--resume=false", "--resume=0", "--resume=no"}) {
    absl::StatusOr<ParsedFlags> flags = Parse({argument});
    ASSERT_TRUE(flags.ok()) << argument;
    EXPECT_FALSE(*flags->Bool("resume")) << argument;
  }
  absl::StatusOr<ParsedFlags> flags = Parse({"--resume=maybe"});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->Bool("resume").status().message(),
            "--resume=maybe: expected true or false");
}

TEST(CommandLineTest, BareBoolDoesNotTakeTheNextArgument) {
  absl::StatusOr<ParsedFlags> flags = Parse({"--resume", "--nodes=2"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_TRUE(*flags->Bool("resume"));
  EXPECT_EQ(*flags->Int("nodes"), 2);
}

TEST(CommandLineTest, Help) {
  for (const char* argument : {"--help", "-h"}) {
    absl::StatusOr<ParsedFlags> flags = Parse({"--nodes=2", argument});
    ASSERT_TRUE(flags.ok()) << argument;
    EXPECT_TRUE(flags->help()) << argument;
  }
}

TEST(CommandLineTest, UnknownFlag) {
  absl::StatusOr<ParsedFlags> flags = Parse({"--no-such-flag=1"});
  EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(flags.status().message(),
            "unknown flag --no-such-flag (see --help)");
}

TEST(CommandLineTest, MissingValue) {
  absl::StatusOr<ParsedFlags> flags = Parse({"--nodes"});
  EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(flags.status().message(), "--nodes needs a value: --nodes=N");
}

TEST(CommandLineTest, PositionalArgumentIsAnError) {
  absl::StatusOr<ParsedFlags> flags = Parse({"extra"});
  EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(flags.status().message(),
              HasSubstr("unexpected argument 'extra'"));
}

TEST(CommandLineTest, IntRanges) {
  absl::StatusOr<ParsedFlags> flags = Parse({"--nodes=abc"});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->Int("nodes", 1, 64).status().message(),
            "--nodes=abc: expected an integer in [1, 64]");

  flags = Parse({"--nodes=65"});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->Int("nodes", 1, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*flags->Int("nodes", 1, 65), 65);
  EXPECT_EQ(flags->Int32("nodes", 1, 64).status().message(),
            "--nodes=65: expected an integer in [1, 64]");

  flags = Parse({"--nodes=-1"});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(*flags->Int("nodes"), -1);
  EXPECT_EQ(flags->Int("nodes", 0).status().message(),
            "--nodes=-1: expected an integer >= 0");
  EXPECT_EQ(flags->Uint64("nodes").status().message(),
            "--nodes=-1: expected a non-negative integer");

  flags = Parse({"--nodes=99999999999"});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(*flags->Int("nodes"), 99999999999);
  EXPECT_FALSE(flags->Int32("nodes").ok());
  EXPECT_EQ(*flags->Uint64("nodes"), 99999999999u);
}

TEST(CommandLineTest, DoubleRanges) {
  absl::StatusOr<ParsedFlags> flags = Parse({"--fraction=0"});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(*flags->Double("fraction", 0, 1), 0);
  EXPECT_EQ(flags->Double("fraction", 0, 1, /*min_exclusive=*/true)
                .status()
                .message(),
            "--fraction=0: expected a number in (0, 1]");
  EXPECT_EQ(flags
                ->Double("fraction", 0, std::numeric_limits<double>::infinity(),
                         /*min_exclusive=*/true)
                .status()
                .message(),
            "--fraction=0: expected a number > 0");

  flags = Parse({"--fraction=1.5"});
  ASSERT_TRUE(flags.ok());
  EXPECT_FALSE(flags->Double("fraction", 0, 1).ok());
  EXPECT_DOUBLE_EQ(*flags->Double("fraction"), 1.5);

  flags = Parse({"--fraction=lots"});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->Double("fraction").status().message(),
            "--fraction=lots: expected a number");

  flags = Parse({"--fraction=nan"});
  ASSERT_TRUE(flags.ok());
  EXPECT_FALSE(flags->Double("fraction", 0, 1).ok());
}

TEST(CommandLineTest, Durations) {
  absl::StatusOr<ParsedFlags> flags = Parse({"--timeout=1h30m"});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(*flags->Duration("timeout"), absl::Minutes(90));

  for (const char* argument :
       {"--timeout=30", "--timeout=0s", "--timeout=-5s", "--timeout=soon"}) {
    flags = Parse({argument});
    ASSERT_TRUE(flags.ok()) << argument;
    EXPECT_THAT(flags->Duration("timeout").status().message(),
                HasSubstr("expected a positive duration such as 30s or 2m"))
        << argument;
  }
}

TEST(CommandLineTest, IntLists) {
  absl::StatusOr<ParsedFlags> flags = Parse({"--lengths=1,256,1024"});
  ASSERT_TRUE(flags.ok());
  EXPECT_THAT(*flags->IntList("lengths"), ElementsAre(1, 256, 1024));

  flags = Parse({"--lengths=1,0,3"});
  ASSERT_TRUE(flags.ok());
  EXPECT_THAT(flags->IntList("lengths").status().message(),
              HasSubstr("--lengths=1,0,3: expected an integer >= 1"));
  EXPECT_THAT(*flags->IntList("lengths", /*min=*/0), ElementsAre(1, 0, 3));

  flags = Parse({"--lengths=1,,3"});
  ASSERT_TRUE(flags.ok());
  EXPECT_FALSE(flags->IntList("lengths").ok());
}

TEST(CommandLineTest, UsageAlignsHelpAndShowsDefaults) {
  const std::string usage =
      Usage("program", "program: does things.", kTable, "Exit codes: 0.\n");
  EXPECT_EQ(usage.rfind("program: does things.\n\nUsage: program "
                        "[--flag=value ...]\n\nFlags:\n",
                        0),
            0u)
      << usage;
  EXPECT_THAT(usage, HasSubstr("--nodes=N"));
  EXPECT_THAT(usage, HasSubstr("nodes in the job (default 1)\n"));
  EXPECT_THAT(usage, HasSubstr("--name=NAME"));
  EXPECT_THAT(usage, HasSubstr("  a name\n"));  // No default shown.
  EXPECT_THAT(usage, HasSubstr("--resume[=true|false]"));
  EXPECT_THAT(usage, HasSubstr("print this help and exit\n\nExit codes: 0.\n"));

  // Every flag line starts its help in the same column: two spaces past the
  // longest label, "--resume[=true|false]" (21 characters).
  const std::vector<std::string> lines = absl::StrSplit(usage, '\n');
  int flag_lines = 0;
  for (const std::string& line : lines) {
    if (line.rfind("  --", 0) != 0) continue;
    ++flag_lines;
    const size_t label_end = line.find(' ', 2);
    ASSERT_NE(label_end, std::string::npos) << line;
    EXPECT_EQ(line.find_first_not_of(' ', label_end), 2u + 21u + 2u) << line;
  }
  EXPECT_EQ(flag_lines, 7);  // The table and --help.
}

TEST(CommandLineTest, UsageWithoutEpilogueEndsAtHelp) {
  const std::string usage = Usage("p", "p.", kTable, "");
  EXPECT_TRUE(absl::EndsWith(usage, "print this help and exit\n")) << usage;
}

}  // namespace
}  // namespace dcp
