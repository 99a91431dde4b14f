#include "common/command_line.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
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
