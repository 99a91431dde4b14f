// The `dcp` command line's surface: help and usage errors, bad values
// naming their flag, simulate's table, JSON, reports and progress, plan's
// timeline and its refusals. Plan files are cli_plan_file_test.cc's.

#include "planner/cli/cli.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/cli/cli_test_util.h"
#include "planner/simulate/markup_test_util.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Json = nlohmann::json;

TEST(CliTest, MainHelp) {
  for (const char* help : {"--help", "-h", "help"}) {
    const CliResult result = RunCli({help});
    EXPECT_EQ(result.exit_code, 0);
    EXPECT_THAT(result.out,
                AllOf(HasSubstr("Usage: dcp SUBCOMMAND"), HasSubstr("simulate"),
                      HasSubstr("plan"), HasSubstr("validate")));
    EXPECT_EQ(result.err, "");
  }
}

TEST(CliTest, NoArgumentsIsAUsageError) {
  const CliResult result = RunCli({});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err, HasSubstr("Usage: dcp SUBCOMMAND"));
}

TEST(CliTest, SubcommandHelp) {
  for (const char* subcommand : {"simulate", "plan", "validate", "price"}) {
    SCOPED_TRACE(subcommand);
    const CliResult result = RunCli({subcommand, "--help"});
    EXPECT_EQ(result.exit_code, 0);
    EXPECT_THAT(result.out,
                AllOf(HasSubstr(absl::StrCat("Usage: dcp ", subcommand)),
                      HasSubstr("--model=PRESET|FILE"), HasSubstr("--nodes=N"),
                      HasSubstr("--help")));
    EXPECT_EQ(RunCli({"help", subcommand}).out, result.out);
    // --help wins over other flags, even wrong ones.
    EXPECT_EQ(RunCli({subcommand, "--bogus", "-h"}).exit_code, 0);
  }
  EXPECT_THAT(RunCli({"simulate", "--help"}).out,
              AllOf(HasSubstr("--steps=K"), HasSubstr("--strategies=a,b"),
                    HasSubstr("--global-batch-tokens=T"),
                    HasSubstr("--write-plans=DIR")));
  EXPECT_THAT(RunCli({"plan", "--help"}).out,
              AllOf(HasSubstr("--step=K"), HasSubstr("--strategy=NAME")));
  EXPECT_THAT(RunCli({"validate", "--help"}).out,
              AllOf(HasSubstr("--plan=FILE"), HasSubstr("--lengths=FILE")));
}

TEST(CliTest, UnknownSubcommand) {
  const CliResult result = RunCli({"simulat"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err, AllOf(HasSubstr("unknown subcommand 'simulat'"),
                                HasSubstr("dcp SUBCOMMAND --help")));
  EXPECT_EQ(CountLines(result.err), 1);
  EXPECT_EQ(RunCli({"--nodes=2"}).exit_code, 2);
}

TEST(CliTest, UnknownFlag) {
  const CliResult result = RunCli({"simulate", "--bogus=3"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err, AllOf(HasSubstr("unknown flag --bogus"),
                                HasSubstr("dcp simulate --help")));
  EXPECT_EQ(CountLines(result.err), 1);
  EXPECT_EQ(result.out, "");
  // A flag of another subcommand is unknown here.
  EXPECT_THAT(RunCli({"validate", "--steps=3"}).err,
              HasSubstr("unknown flag --steps"));
  EXPECT_THAT(RunCli({"plan", "stray"}).err,
              HasSubstr("unexpected argument 'stray'"));
}

TEST(CliTest, BadValuesNameTheFlag) {
  const CliResult nodes = RunCli({"simulate", "--nodes=0"});
  EXPECT_EQ(nodes.exit_code, 2);
  EXPECT_THAT(nodes.err,
              AllOf(HasSubstr("--nodes=0"), HasSubstr("must be at least 1")));
  EXPECT_EQ(CountLines(nodes.err), 1);

  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"simulate", "--nodes=abc"}, "--nodes=abc: is not an integer"},
      {{"simulate", "--gpus-per-node=-8"}, "--gpus-per-node=-8"},
      {{"simulate", "--steps=0"}, "--steps=0"},
      {{"simulate", "--memory-fraction=1.5"}, "--memory-fraction=1.5"},
      {{"simulate", "--format=xml"},
       "--format=xml: must be one of table, json"},
      {{"simulate", "--strategies=dcp,magic"}, "unknown strategy 'magic'"},
      {{"simulate", "--sp-sizes=1,x"}, "--sp-sizes=1,x"},
      {{"simulate", "--sp-sizes=3"}, "SP size 3"},
      {{"simulate", "--model=no-such-model"}, "no-such-model"},
      {{"simulate", "--workload=zipf"}, "--workload"},
      {{"simulate", "--nodes"}, "flag --nodes needs a value"},
      {{"simulate", "--nodes=1", "--nodes=2"}, "given more than once"},
      {{"simulate", "--global-batch-tokens=1K", "--global-batch-samples=4"},
       "exclusive"},
      {{"simulate", "--lengths=/no/such/file"}, "/no/such/file"},
      {{"plan", "--strategy=magic"}, "--strategy=magic"},
      {{"simulate", "--megatron-recompute=never"},
       "--megatron-recompute=never: must be one of run, micro-batch"},
      {{"plan", "--step=-1"}, "--step=-1"},
      {{"plan", "--gpus=30"}, "--gpus=30: is not a multiple of"},
      {{"plan", "--gpus=16", "--nodes=2"}, "cannot be combined with --nodes"},
      {{"simulate", "--static-sp=3"}, "--static-sp: SP size 3"},
      {{"validate", "--lengths=x"}, "--plan=FILE is required"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    const CliResult result = RunCli(c.args);
    EXPECT_EQ(result.exit_code, 2);
    EXPECT_THAT(result.err, HasSubstr(c.message));
    EXPECT_EQ(CountLines(result.err), 1) << result.err;
  }
}

TEST(CliTest, SimulateJsonHasEveryStrategyAndField) {
  const CliResult result = RunCli(With(
      {"simulate", "--format=json", "--steps", "3", "--seed=5"}, kSmallSetup));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json json =
      Json::parse(result.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(json.is_discarded()) << result.out;
  ASSERT_EQ(json["strategies"].size(), 9u);
  std::vector<std::string> names;
  for (const Json& stats : json["strategies"]) {
    names.push_back(stats["name"].get<std::string>());
    for (const char* field :
         {"mean_step_seconds", "speedup_vs_bucket", "mean_idle_fraction",
          "max_memory_fraction", "mean_gap_to_lower_bound"}) {
      EXPECT_TRUE(stats[field].is_number()) << field;
    }
    EXPECT_LE(json["lower_bound_mean_step_seconds"].get<double>(),
              stats["mean_step_seconds"].get<double>() * (1 + 1e-12));
  }
  EXPECT_EQ(names, std::vector<std::string>({"bucket", "packed", "best-static",
                                             "megatron-dyncp", "megatron-hcp",
                                             "videosys-dcp",
                                             "dcp", "dcp-fixed-accum",
                                             "dcp-uniform-recompute"}));
  EXPECT_TRUE(json["plan_latency_ms"]["p50"].is_number());
  EXPECT_TRUE(json["plan_latency_ms"]["p99"].is_number());
  // Three steps is a short run: no progress lines.
  EXPECT_EQ(result.err, "");
}

TEST(CliTest, SimulateHelpSaysHowPeersThatRegroupArePriced) {
  const CliResult result = RunCli({"simulate", "--help"});
  EXPECT_EQ(result.exit_code, 0);
  // The description is wrapped: read it as one line.
  const std::string text = absl::StrReplaceAll(result.out, {{"\n", " "}});
  EXPECT_THAT(text, HasSubstr("separated by barriers"));
  EXPECT_THAT(text, HasSubstr("sum of each phase's slowest group"));
  EXPECT_THAT(text, HasSubstr("--megatron-recompute"));
}

TEST(CliTest, SimulatePeersPrintTheirSettingAndPhases) {
  for (const char* recompute : {"run", "micro-batch"}) {
    const CliResult result =
        RunCli(With({"simulate", "--format=json", "--steps=2",
                     "--strategies=megatron-hcp,videosys-dcp,dcp",
                     absl::StrCat("--megatron-recompute=", recompute)},
                    kSmallSetup));
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const Json json =
        Json::parse(result.out, nullptr, /*allow_exceptions=*/false);
    ASSERT_EQ(json["strategies"].size(), 3u) << result.out;
    const Json& megatron = json["strategies"][0];
    EXPECT_EQ(megatron["name"], "megatron-hcp");
    EXPECT_THAT(megatron["setting"].get<std::string>(),
                HasSubstr(std::string(recompute) == "run"
                              ? "layers checkpointed"
                              : "least recompute per micro-batch"));
    for (const Json& stats : json["strategies"]) {
      EXPECT_GE(stats["mean_phases"].get<double>(), 1.0);
    }
    EXPECT_EQ(json["strategies"][2]["mean_phases"].get<double>(), 1.0);
    // dcp is no slower than either peer on these batches.
    EXPECT_LE(json["strategies"][2]["mean_step_seconds"].get<double>(),
              megatron["mean_step_seconds"].get<double>());
    EXPECT_LE(json["strategies"][2]["mean_step_seconds"].get<double>(),
              json["strategies"][1]["mean_step_seconds"].get<double>());
  }
}

TEST(CliTest, SimulateTableAndProgress) {
  const CliResult result = RunCli(
      With({"simulate", "--steps=10", "--strategies=bucket,dcp"}, kSmallSetup));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, AllOf(HasSubstr("strategy"), HasSubstr("bucket"),
                                HasSubstr("dcp"), HasSubstr("lower bound"),
                                Not(HasSubstr("packed"))));
  EXPECT_THAT(result.err,
              AllOf(HasSubstr("step 1/10"), HasSubstr("step 10/10")));
}

TEST(CliTest, PlanDrawsItsTimelineAsSvg) {
  const CliResult result =
      RunCli(With({"plan", "--format=svg", "--step=1"}, kSmallSetup));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(
      result.out,
      AllOf(StartsWith("<svg xmlns=\"http://www.w3.org/2000/svg\""),
            HasSubstr("data-num-ranks=\"8\""), HasSubstr("class=\"row\""),
            HasSubstr("lower bound"), EndsWith("</svg>\n")));
  // Parsed, its rows are the plan's groups (the same step as JSON): every
  // rank once, each row labelled with its group's SP size and accumulation.
  const CliResult json =
      RunCli(With({"plan", "--format=json", "--step=1"}, kSmallSetup));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json plan = Json::parse(json.out);
  const MarkupDocument svg = MarkupDocument::ParseXml(result.out);
  ASSERT_NE(svg.doc, nullptr) << "not well-formed XML";
  const std::vector<xmlNode*> rows =
      svg.Select("//*[local-name()='g'][@class='row']");
  ASSERT_EQ(rows.size(), plan["groups"].size());
  std::vector<int> ranks;
  for (xmlNode* row : rows) {
    const Json& group =
        plan["groups"]
            [static_cast<int>(NumberAttribute(row, "data-group-index"))];
    std::vector<int> row_ranks;
    for (absl::string_view rank :
         absl::StrSplit(Attribute(row, "data-ranks"), ',')) {
      int value = -1;
      ASSERT_TRUE(absl::SimpleAtoi(rank, &value)) << rank;
      row_ranks.push_back(value);
    }
    EXPECT_EQ(row_ranks, group["ranks"].get<std::vector<int>>());
    ranks.insert(ranks.end(), row_ranks.begin(), row_ranks.end());
    EXPECT_EQ(NumberAttribute(row, "data-sp-size"),
              group["sp_size"].get<int>());
    EXPECT_EQ(NumberAttribute(row, "data-micro-batches"),
              group["micro_batches"].size());
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(CliTest, SimulateWritesAReportOrSaysWhyNot) {
  const std::string directory = TempPath("report");
  const CliResult result = RunCli(
      With({"simulate", "--steps=3", absl::StrCat("--report=", directory)},
           kSmallSetup));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.err,
              HasSubstr(absl::StrCat("wrote ", directory, "/index.html")));
  EXPECT_THAT(ReadTestFile(directory + "/index.html"),
              AllOf(HasSubstr("<!DOCTYPE html>"),
                    HasSubstr("Median batch of each strategy")));
  // A file where the directory should be: a failure naming it.
  const std::string blocker = TempPath("report_blocker");
  WriteTestFile(blocker, "x");
  const CliResult failed = RunCli(With(
      {"simulate", "--steps=1", absl::StrCat("--report=", blocker, "/sub")},
      kSmallSetup));
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_THAT(failed.err, HasSubstr("report_blocker"));
}

TEST(CliTest, AbsurdBatchSizesAreUsageErrors) {
  // These used to abort with std::bad_alloc.
  for (const char* flag : {"--global-batch-tokens=1125899906842624",
                           "--global-batch-samples=1073741824"}) {
    const CliResult result =
        RunCli({"plan", "--nodes=1", "--gpus-per-node=8", flag});
    EXPECT_EQ(result.exit_code, 2) << flag << ": " << result.err;
    EXPECT_THAT(result.err, HasSubstr(std::string(flag).substr(0, 17))) << flag;
  }
  // A length beyond 2^40 tokens in a lengths file is a usage error naming
  // the line, for every subcommand that reads one (validate and price once
  // summed such lengths to "-9223372036854775808 tokens").
  const std::string lengths_path = TempPath("absurd_lengths.txt");
  WriteTestFile(lengths_path, "1024\n4611686018427387904\n");
  const CliResult result = RunCli({"plan", "--nodes=1", "--gpus-per-node=8",
                                   absl::StrCat("--lengths=", lengths_path)});
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("line 2: 4611686018427387904 tokens"));
  const std::string small_lengths = TempPath("absurd_small_lengths.txt");
  const std::string plan_path = TempPath("absurd_plan.json");
  WriteTestFile(small_lengths, "1024\n2048\n");
  const CliResult plan = RunCli({"plan", "--nodes=1", "--gpus-per-node=8",
                                 absl::StrCat("--lengths=", small_lengths)});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  WriteTestFile(plan_path, plan.out);
  for (const char* subcommand : {"validate", "price"}) {
    const CliResult checked =
        RunCli({subcommand, "--nodes=1", "--gpus-per-node=8",
                absl::StrCat("--plan=", plan_path),
                absl::StrCat("--lengths=", lengths_path)});
    EXPECT_EQ(checked.exit_code, 2) << subcommand << ": " << checked.err;
    EXPECT_THAT(checked.err, HasSubstr("line 2: 4611686018427387904 tokens"))
        << subcommand;
    EXPECT_THAT(checked.err, Not(HasSubstr("-9223372036854775808")))
        << subcommand;
  }
}

// A model whose sizes overflow int64 products used to give a plan at "peak
// memory 0.0%" that `dcp validate` called valid; now it is a usage error
// naming the field.
TEST(CliTest, AbsurdModelSizesAreUsageErrors) {
  const std::string model_path = TempPath("absurd_model.json");
  WriteTestFile(model_path,
                R"({"name": "x", "num_layers": 2, "hidden_size": 2147483520,
                "num_attention_heads": 32, "num_kv_heads": 32,
                "ffn_hidden_size": 2147483647, "vocab_size": 2147483647})");
  const CliResult result = RunCli({"plan", "--nodes=1", "--gpus-per-node=8",
                                   "--global-batch-samples=4",
                                   absl::StrCat("--model=", model_path)});
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("hidden_size = 2147483520"));
  EXPECT_THAT(result.err, HasSubstr("at most 2^20"));
}

// Large batches take seconds: `dcp plan` says on stderr what the search has
// done, from 2^17 sequences; smaller ones print nothing there. A batch past
// what can be planned is refused before planning, naming the limit.
TEST(CliTest, PlanOfALargeBatchPrintsProgressAndTooLargeIsRefusedUpFront) {
  const std::string large_path = TempPath("large_lengths.txt");
  std::string text;
  for (int i = 0; i < (1 << 17); ++i)
    absl::StrAppend(&text, 100 + i % 97, "\n");
  WriteTestFile(large_path, text);
  const CliResult large =
      RunCli({"plan", "--nodes=1", "--gpus-per-node=8", "--model=tiny",
              "--format=table", absl::StrCat("--lengths=", large_path)});
  ASSERT_EQ(large.exit_code, 0) << large.err;
  EXPECT_THAT(large.err, StartsWith("dcp plan: priced 131072 sequences (97 "
                                    "distinct lengths)"));
  EXPECT_THAT(large.err, HasSubstr("dcp plan: searched: predicted step"));
  EXPECT_THAT(large.out, StartsWith("strategy dcp: 131072 sequences"));

  const std::string small_path = TempPath("small_lengths.txt");
  WriteTestFile(small_path, "100\n200\n");
  const CliResult small =
      RunCli({"plan", "--nodes=1", "--gpus-per-node=8", "--model=tiny",
              absl::StrCat("--lengths=", small_path)});
  ASSERT_EQ(small.exit_code, 0) << small.err;
  EXPECT_EQ(small.err, "");

  const std::string too_many_path = TempPath("too_many_lengths.txt");
  for (int i = 0; i < (1 << 20) - (1 << 17) + 1; ++i) {
    absl::StrAppend(&text, "100\n");
  }
  WriteTestFile(too_many_path, text);
  const CliResult too_many =
      RunCli({"plan", "--nodes=1", "--gpus-per-node=8", "--model=tiny",
              absl::StrCat("--lengths=", too_many_path)});
  EXPECT_EQ(too_many.exit_code, 2) << too_many.err;
  EXPECT_THAT(too_many.err,
              HasSubstr("1048577 sequences; at most 1048576 (2^20) can be "
                        "planned as one batch"));
  EXPECT_EQ(too_many.out, "");
}

TEST(CliTest, PlanFromWorkloadStreamWritesLengthsAndTable) {
  const std::string lengths_path = TempPath("stream_lengths.txt");
  const std::string plan_path = TempPath("stream_plan.json");
  const CliResult plan = RunCli(With(
      {"plan", "--step=2", "--write-lengths=" + lengths_path}, kSmallSetup));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  WriteTestFile(plan_path, plan.out);
  const CliResult valid = RunCli({"validate", "--plan=" + plan_path,
                                  "--lengths=" + lengths_path, "--nodes=1"});
  EXPECT_EQ(valid.exit_code, 0) << valid.out << valid.err;

  const CliResult table =
      RunCli(With({"plan", "--step=2", "--format=table"}, kSmallSetup));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out,
              AllOf(HasSubstr("strategy dcp"), HasSubstr("lower bound"),
                    HasSubstr("ranks"), HasSubstr("SP")));

  // --step belongs to a stream, not to a lengths file.
  EXPECT_EQ(RunCli({"plan", "--lengths=" + lengths_path, "--step=1"}).exit_code,
            2);
}

TEST(CliTest, PlanningFailureExitsOne) {
  const std::string lengths_path = TempPath("huge_lengths.txt");
  WriteTestFile(lengths_path, "1024\n4194304\n");
  const CliResult result =
      RunCli({"plan", "--lengths=" + lengths_path, "--nodes=1"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, AllOf(HasSubstr("dcp plan: "), HasSubstr("4194304")));
  EXPECT_EQ(CountLines(result.err), 1);
}

}  // namespace
}  // namespace dcp
