#include "planner/cli/cli.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
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

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/dcp_cli_test_", name);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
  ASSERT_TRUE(file.good()) << path;
}

int CountLines(const std::string& text) {
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

// One node of 8 GPUs and short sequences keep every run fast.
const std::vector<std::string> kSmallSetup = {"--nodes=1", "--gpus-per-node=8",
                                              "--workload=longtail:max=32768",
                                              "--global-batch-tokens=128K"};

std::vector<std::string> With(std::vector<std::string> args,
                              const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// Writes a batch of `long_lengths` followed by `short_count` sequences of
// 1000 + 37 i tokens to the temporary file `name`; returns its path.
std::string WriteLongAmongShortLengths(const std::string& name,
                                       const std::vector<int64_t>& long_lengths,
                                       int short_count) {
  std::string text;
  for (int64_t length : long_lengths) absl::StrAppend(&text, length, "\n");
  for (int i = 0; i < short_count; ++i) {
    absl::StrAppend(&text, 1000 + 37 * i, "\n");
  }
  const std::string path = TempPath(name);
  WriteFile(path, text);
  return path;
}

// The flags of the batch of `lengths_path` on one node of 8 GPUs.
std::vector<std::string> OneNodeBatch(const std::string& lengths_path) {
  return {"--nodes=1", "--gpus-per-node=8",
          absl::StrCat("--lengths=", lengths_path)};
}

// `dcp validate` accepts the plan at `plan_path` for the batch of
// `lengths_path` (on `nodes` nodes of 8 GPUs), and `dcp price` prices it at
// the step time `planned` (what wrote it) predicted, to 1e-9 of it and 1e-9
// s. Returns what `dcp validate` printed.
std::string ExpectValidatesAndPricesAsPlanned(const std::string& plan_path,
                                              const std::string& lengths_path,
                                              const Json& planned,
                                              int nodes = 1) {
  const std::vector<std::string> files = {
      absl::StrCat("--nodes=", nodes), "--gpus-per-node=8",
      absl::StrCat("--plan=", plan_path),
      absl::StrCat("--lengths=", lengths_path)};
  const CliResult valid = RunCli(With({"validate"}, files));
  EXPECT_EQ(valid.exit_code, 0) << valid.out << valid.err;
  const CliResult priced = RunCli(With({"price", "--format=json"}, files));
  EXPECT_EQ(priced.exit_code, 0) << priced.out << priced.err;
  if (priced.exit_code == 0) {
    const double step_seconds = planned["predicted_step_seconds"].get<double>();
    EXPECT_NEAR(Json::parse(priced.out)["step_seconds"].get<double>(),
                step_seconds, 1e-9 * std::min(1.0, step_seconds));
  }
  return valid.out;
}

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
  std::ifstream file(directory + "/index.html");
  std::stringstream html;
  html << file.rdbuf();
  EXPECT_THAT(html.str(), AllOf(HasSubstr("<!DOCTYPE html>"),
                                HasSubstr("Median batch of each strategy")));
  // A file where the directory should be: a failure naming it.
  const std::string blocker = TempPath("report_blocker");
  WriteFile(blocker, "x");
  const CliResult failed = RunCli(With(
      {"simulate", "--steps=1", absl::StrCat("--report=", blocker, "/sub")},
      kSmallSetup));
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_THAT(failed.err, HasSubstr("report_blocker"));
}

// `dcp simulate --write-plans` writes every strategy's plan of every step
// in the JSON `dcp price` and `dcp validate` read, with the step's lengths.
TEST(CliTest, SimulateWritesPlansThatPriceReads) {
  const std::string directory = TempPath("write_plans");
  const std::vector<std::string> strategies = {
      "bucket", "packed", "best-static", "megatron-dyncp", "megatron-hcp",
      "videosys-dcp", "dcp", "dcp-one-layout", "dcp-fixed-accum",
      "dcp-uniform-recompute", "dcp-phased"};
  const CliResult result = RunCli(
      With({"simulate", "--steps=2",
            absl::StrCat("--strategies=", absl::StrJoin(strategies, ",")),
            absl::StrCat("--write-plans=", directory)},
           kSmallSetup));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.err,
              HasSubstr(absl::StrCat("wrote 22 plans to ", directory)));
  for (const std::string& strategy : strategies) {
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE(absl::StrCat(strategy, " step ", step));
      const std::string plan_path =
          absl::StrCat(directory, "/", strategy, "/step_", step, ".json");
      std::ifstream file(plan_path);
      std::stringstream text;
      text << file.rdbuf();
      ASSERT_TRUE(file.good()) << plan_path;
      const Json planned = Json::parse(text.str());
      EXPECT_EQ(planned["strategy"], strategy);
      ExpectValidatesAndPricesAsPlanned(
          plan_path,
          absl::StrCat(directory, "/lengths/step_", step, ".txt"), planned);
    }
  }
  // The batch of step 1 is the one `dcp plan --step=1` plans.
  const CliResult plan = RunCli(With(
      {"plan", "--strategy=packed", "--step=1", "--format=json"}, kSmallSetup));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  std::ifstream lengths(absl::StrCat(directory, "/lengths/step_1.txt"));
  std::stringstream lengths_text;
  lengths_text << lengths.rdbuf();
  EXPECT_EQ(Json::parse(plan.out)["num_sequences"].get<int>(),
            CountLines(lengths_text.str()));

  // A file where the directory should be: a failure naming it, before
  // anything is simulated.
  const std::string blocker = TempPath("write_plans_blocker");
  WriteFile(blocker, "x");
  const CliResult failed =
      RunCli(With({"simulate", "--steps=1",
                   absl::StrCat("--write-plans=", blocker, "/sub")},
                  kSmallSetup));
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_THAT(failed.err, AllOf(HasSubstr("--write-plans"),
                                HasSubstr("write_plans_blocker/sub")));
  EXPECT_EQ(failed.out, "");
}

// dcp re-groups only some batches: its plans of a run are written, priced
// and validated whichever kind each step's is (steps of one layout as
// plans of one layout).
TEST(CliTest, SimulateWritesDcpPlansOfOneLayoutAndOfPhases) {
  const std::string directory = TempPath("write_mixed_plans");
  const CliResult result = RunCli(
      {"simulate", "--strategies=dcp", "--steps=6", "--nodes=4",
       "--gpus-per-node=8",
       "--workload=longtail:median=640,sigma=1.1,tail_fraction=0.01,"
       "tail_min=8192,alpha=1.5,max=32768",
       absl::StrCat("--write-plans=", directory)});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.err,
              HasSubstr(absl::StrCat("wrote 6 plans to ", directory)));
  int phased = 0;
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const std::string plan_path =
        absl::StrCat(directory, "/dcp/step_", step, ".json");
    std::ifstream file(plan_path);
    std::stringstream text;
    text << file.rdbuf();
    ASSERT_TRUE(file.good()) << plan_path;
    const Json planned = Json::parse(text.str());
    EXPECT_EQ(planned["strategy"], "dcp");
    EXPECT_NE(planned.contains("phases"), planned.contains("groups"));
    phased += planned.contains("phases") ? 1 : 0;
    ExpectValidatesAndPricesAsPlanned(
        plan_path, absl::StrCat(directory, "/lengths/step_", step, ".txt"),
        planned, /*nodes=*/4);
  }
  // Both kinds were written.
  EXPECT_GT(phased, 0);
  EXPECT_LT(phased, 6);
}

// Writes `lengths` (one per line) and the `packed` plan of them on one
// node of 8 GPUs to files named after `name`; returns the plan's output.
struct PlannedFiles {
  std::string lengths_path;
  std::string plan_path;
  CliResult plan;
};
PlannedFiles WritePackedPlan(const std::string& name,
                             const std::string& lengths) {
  PlannedFiles files{
      TempPath(name + "_lengths.txt"), TempPath(name + "_plan.json"), {}};
  WriteFile(files.lengths_path, lengths);
  files.plan =
      RunCli({"plan", "--nodes=1", "--gpus-per-node=8", "--strategy=packed",
              absl::StrCat("--lengths=", files.lengths_path)});
  WriteFile(files.plan_path, files.plan.out);
  return files;
}

TEST(CliTest, PriceAPlanFromAFile) {
  const PlannedFiles files = WritePackedPlan(
      "price", "4096\n1000\n30000\n512\n8192\n700\n2048\n12000\n");
  const std::string& lengths_path = files.lengths_path;
  const std::string& plan_path = files.plan_path;
  const CliResult& plan = files.plan;
  const std::vector<std::string> cluster = {"--nodes=1", "--gpus-per-node=8"};
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const Json planned = Json::parse(plan.out);

  const CliResult json =
      RunCli(With({"price", "--format=json", absl::StrCat("--plan=", plan_path),
                   absl::StrCat("--lengths=", lengths_path)},
                  cluster));
  ASSERT_EQ(json.exit_code, 0) << json.err << json.out;
  const Json priced = Json::parse(json.out);
  EXPECT_DOUBLE_EQ(priced["step_seconds"].get<double>(),
                   planned["predicted_step_seconds"].get<double>());
  EXPECT_EQ(priced["strategy"], "packed");
  EXPECT_EQ(priced["groups"].size(), planned["groups"].size());

  const CliResult table =
      RunCli(With({"price", absl::StrCat("--plan=", plan_path),
                   absl::StrCat("--lengths=", lengths_path)},
                  cluster));
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_THAT(table.out, AllOf(HasSubstr("predicted step"), HasSubstr("idle")));
  const CliResult svg =
      RunCli(With({"price", "--format=svg", absl::StrCat("--plan=", plan_path),
                   absl::StrCat("--lengths=", lengths_path)},
                  cluster));
  EXPECT_EQ(svg.exit_code, 0);
  EXPECT_THAT(svg.out, StartsWith("<svg"));
  const MarkupDocument drawn = MarkupDocument::ParseXml(svg.out);
  ASSERT_NE(drawn.doc, nullptr) << "not well-formed XML";
  int drawn_ranks = 0;
  for (xmlNode* row : drawn.Select("//*[local-name()='g'][@class='row']")) {
    drawn_ranks +=
        static_cast<int>(std::vector<absl::string_view>(
                             absl::StrSplit(Attribute(row, "data-ranks"), ','))
                             .size());
  }
  EXPECT_EQ(drawn_ranks, 8);

  // The same plan against a batch it was not made for: invalid, exit 1.
  WriteFile(lengths_path, "4096\n1000\n");
  const CliResult invalid =
      RunCli(With({"price", absl::StrCat("--plan=", plan_path),
                   absl::StrCat("--lengths=", lengths_path)},
                  cluster));
  EXPECT_EQ(invalid.exit_code, 1);
  EXPECT_THAT(invalid.out, HasSubstr("plan is invalid"));
  EXPECT_EQ(RunCli(With({"price"}, cluster)).exit_code, 2);
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
  WriteFile(lengths_path, "1024\n4611686018427387904\n");
  const CliResult result = RunCli({"plan", "--nodes=1", "--gpus-per-node=8",
                                   absl::StrCat("--lengths=", lengths_path)});
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("line 2: 4611686018427387904 tokens"));
  const std::string small_lengths = TempPath("absurd_small_lengths.txt");
  const std::string plan_path = TempPath("absurd_plan.json");
  WriteFile(small_lengths, "1024\n2048\n");
  const CliResult plan = RunCli({"plan", "--nodes=1", "--gpus-per-node=8",
                                 absl::StrCat("--lengths=", small_lengths)});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  WriteFile(plan_path, plan.out);
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
  WriteFile(model_path,
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
  WriteFile(large_path, text);
  const CliResult large =
      RunCli({"plan", "--nodes=1", "--gpus-per-node=8", "--model=tiny",
              "--format=table", absl::StrCat("--lengths=", large_path)});
  ASSERT_EQ(large.exit_code, 0) << large.err;
  EXPECT_THAT(large.err, StartsWith("dcp plan: priced 131072 sequences (97 "
                                    "distinct lengths)"));
  EXPECT_THAT(large.err, HasSubstr("dcp plan: searched: predicted step"));
  EXPECT_THAT(large.out, StartsWith("strategy dcp: 131072 sequences"));

  const std::string small_path = TempPath("small_lengths.txt");
  WriteFile(small_path, "100\n200\n");
  const CliResult small =
      RunCli({"plan", "--nodes=1", "--gpus-per-node=8", "--model=tiny",
              absl::StrCat("--lengths=", small_path)});
  ASSERT_EQ(small.exit_code, 0) << small.err;
  EXPECT_EQ(small.err, "");

  const std::string too_many_path = TempPath("too_many_lengths.txt");
  for (int i = 0; i < (1 << 20) - (1 << 17) + 1; ++i) {
    absl::StrAppend(&text, "100\n");
  }
  WriteFile(too_many_path, text);
  const CliResult too_many =
      RunCli({"plan", "--nodes=1", "--gpus-per-node=8", "--model=tiny",
              absl::StrCat("--lengths=", too_many_path)});
  EXPECT_EQ(too_many.exit_code, 2) << too_many.err;
  EXPECT_THAT(too_many.err,
              HasSubstr("1048577 sequences; at most 1048576 (2^20) can be "
                        "planned as one batch"));
  EXPECT_EQ(too_many.out, "");
}

TEST(CliTest, PlanThenValidateRoundTrip) {
  const std::string lengths_path = TempPath("lengths.txt");
  const std::string plan_path = TempPath("plan.json");
  WriteFile(lengths_path,
            "# a small batch\n4096\n1000\n30000\n512\n8192\n"
            "700\n2048\n12000\n");
  const std::vector<std::string> cluster = {"--nodes=1", "--gpus-per-node=8"};
  const CliResult plan =
      RunCli(With({"plan", absl::StrCat("--lengths=", lengths_path)}, cluster));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const Json json = Json::parse(plan.out, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << plan.out;
  EXPECT_EQ(json["strategy"], "dcp");
  EXPECT_EQ(json["num_sequences"], 8);
  EXPECT_GT(json["lower_bound_seconds"].get<double>(), 0);
  WriteFile(plan_path, plan.out);

  const CliResult valid = RunCli(With(
      {"validate", "--plan", plan_path, "--lengths", lengths_path}, cluster));
  EXPECT_EQ(valid.exit_code, 0) << valid.out << valid.err;
  EXPECT_THAT(valid.out,
              AllOf(HasSubstr("plan is valid"), HasSubstr("8 sequence(s)")));

  // The same plan on a bigger cluster leaves ranks without a group.
  const CliResult wrong_cluster =
      RunCli({"validate", "--plan", plan_path, "--lengths", lengths_path,
              "--nodes=2"});
  EXPECT_EQ(wrong_cluster.exit_code, 1);
  EXPECT_THAT(wrong_cluster.out, HasSubstr("ranks are in no group"));
}

TEST(CliTest, DerivedFieldsThatContradictThePlanAreInvalid) {
  const PlannedFiles files =
      WritePackedPlan("derived", "4096\n1000\n30000\n512\n8192\n");
  const std::string& lengths_path = files.lengths_path;
  const std::string& plan_path = files.plan_path;
  const std::vector<std::string> cluster = {"--nodes=1", "--gpus-per-node=8"};
  ASSERT_EQ(files.plan.exit_code, 0) << files.plan.err;
  const Json original = Json::parse(files.plan.out);
  for (const char* subcommand : {"validate", "price"}) {
    EXPECT_EQ(RunCli(With({subcommand, "--plan=" + plan_path,
                           "--lengths=" + lengths_path},
                          cluster))
                  .exit_code,
              0)
        << subcommand;
  }
  struct Edit {
    const char* path;
    std::function<void(Json&)> apply;
  };
  const std::vector<Edit> edits = {
      {"groups[0].sp_size", [](Json& j) { j["groups"][0]["sp_size"] = 3; }},
      {"groups[0].micro_batches[0].tokens",
       [](Json& j) { j["groups"][0]["micro_batches"][0]["tokens"] = 7; }},
      {"num_sequences", [](Json& j) { j["num_sequences"] = 99; }},
      {"memory_budget_bytes", [](Json& j) { j["memory_budget_bytes"] = 1e9; }},
      {"gap_to_lower_bound", [](Json& j) { j["gap_to_lower_bound"] = -0.5; }},
  };
  for (const Edit& edit : edits) {
    Json json = original;
    edit.apply(json);
    WriteFile(plan_path, json.dump());
    for (const char* subcommand : {"validate", "price"}) {
      const CliResult result = RunCli(
          With({subcommand, "--plan=" + plan_path, "--lengths=" + lengths_path},
               cluster));
      EXPECT_EQ(result.exit_code, 1) << subcommand << " " << edit.path;
      EXPECT_THAT(result.out,
                  AllOf(HasSubstr("plan is invalid"), HasSubstr(edit.path)))
          << subcommand;
    }
  }
}

TEST(CliTest, CorruptedPlanFailsValidation) {
  const std::string lengths_path = TempPath("corrupt_lengths.txt");
  const std::string plan_path = TempPath("corrupt_plan.json");
  WriteFile(lengths_path, "4096\n1000\n30000\n512\n8192\n");
  const std::vector<std::string> cluster = {"--nodes=1", "--gpus-per-node=8"};
  const CliResult plan = RunCli(With(
      {"plan", absl::StrCat("--lengths=", lengths_path), "--strategy=packed"},
      cluster));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  Json json = Json::parse(plan.out);
  // Run sequence 0 twice: append it to the last micro-batch that lacks it.
  bool corrupted = false;
  for (Json& group : json["groups"]) {
    for (Json& micro_batch : group["micro_batches"]) {
      Json& indices = micro_batch["sequence_indices"];
      if (!corrupted &&
          std::find(indices.begin(), indices.end(), Json(0)) == indices.end()) {
        indices.push_back(0);
        corrupted = true;
      }
    }
  }
  ASSERT_TRUE(corrupted) << plan.out;
  WriteFile(plan_path, json.dump());
  const CliResult result = RunCli(
      With({"validate", "--plan=" + plan_path, "--lengths=" + lengths_path},
           cluster));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.out, AllOf(HasSubstr("plan is invalid"),
                                HasSubstr("sequence 0 is planned twice")));

  // Not JSON at all, and a wrongly typed field.
  WriteFile(plan_path, "{\"strategy\": ");
  EXPECT_EQ(RunCli(With({"validate", "--plan=" + plan_path,
                         "--lengths=" + lengths_path},
                        cluster))
                .exit_code,
            1);
  json["groups"][0]["ranks"] = "all";
  WriteFile(plan_path, json.dump());
  const CliResult typed = RunCli(
      With({"validate", "--plan=" + plan_path, "--lengths=" + lengths_path},
           cluster));
  EXPECT_EQ(typed.exit_code, 1);
  EXPECT_THAT(typed.out, HasSubstr("groups[0].ranks"));

  // A plan file that does not exist is a usage error.
  EXPECT_EQ(RunCli(With({"validate", "--plan=/no/such/plan.json",
                         "--lengths=" + lengths_path},
                        cluster))
                .exit_code,
            2);
}

TEST(CliTest, PlanFromWorkloadStreamWritesLengthsAndTable) {
  const std::string lengths_path = TempPath("stream_lengths.txt");
  const std::string plan_path = TempPath("stream_plan.json");
  const CliResult plan = RunCli(With(
      {"plan", "--step=2", "--write-lengths=" + lengths_path}, kSmallSetup));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  WriteFile(plan_path, plan.out);
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
  WriteFile(lengths_path, "1024\n4194304\n");
  const CliResult result =
      RunCli({"plan", "--lengths=" + lengths_path, "--nodes=1"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, AllOf(HasSubstr("dcp plan: "), HasSubstr("4194304")));
  EXPECT_EQ(CountLines(result.err), 1);
}

// A plan that re-groups the ranks within the step (JSON "phases"): the
// long sequence on SP 8, then after the barrier the rest on SP 1 groups.
std::string TwoPhasePlanJson(const std::string& phase0_extra,
                             const std::string& last_group) {
  std::string groups1;
  for (int r = 0; r < 7; ++r) {
    absl::StrAppend(
        &groups1, "{\"ranks\": [", r,
        "], \"predicted_seconds\": 0, \"micro_batches\": "
        "[{\"sequence_indices\": [",
        r + 1,
        "], \"checkpointed_layers\": 0, "
        "\"predicted_seconds\": 0, \"predicted_peak_bytes\": 0}]},");
  }
  if (last_group.empty()) {
    groups1.pop_back();  // the trailing comma
  } else {
    absl::StrAppend(&groups1, last_group);
  }
  return absl::StrCat(
      "{\"strategy\": \"dcp-phased\", \"predicted_step_seconds\": 0, "
      "\"lower_bound_seconds\": 0, \"exposed_allreduce_seconds\": 0, "
      "\"num_sequences\": 8, \"phases\": [",
      "{\"groups\": [{\"ranks\": [0,1,2,3,4,5,6,7], \"sp_size\": 8, "
      "\"predicted_seconds\": 0, \"micro_batches\": [{\"sequence_indices\": "
      "[0",
      phase0_extra,
      "], \"checkpointed_layers\": 0, \"predicted_seconds\": 0, "
      "\"predicted_peak_bytes\": 0}]}]},",
      "{\"groups\": [", groups1, "]}]}");
}

TEST(CliTest, ValidateAndPriceAPlanOfPhases) {
  const std::string lengths_path = TempPath("phases_lengths.txt");
  const std::string plan_path = TempPath("phases_plan.json");
  WriteFile(lengths_path, "65536\n1000\n2000\n1500\n3000\n800\n1200\n900\n");
  const std::string idle_rank_7 =
      "{\"ranks\": [7], \"predicted_seconds\": 0, \"micro_batches\": []}";
  const std::vector<std::string> files = {
      "--nodes=1", "--gpus-per-node=8", absl::StrCat("--plan=", plan_path),
      absl::StrCat("--lengths=", lengths_path)};

  WriteFile(plan_path, TwoPhasePlanJson("", idle_rank_7));
  const CliResult valid = RunCli(With({"validate"}, files));
  EXPECT_EQ(valid.exit_code, 0) << valid.out << valid.err;
  EXPECT_THAT(valid.out,
              AllOf(HasSubstr("plan is valid: 2 phase(s) of 9 SP group(s)"),
                    HasSubstr("8 sequence(s) in 8 micro-batch(es)")));
  const CliResult table = RunCli(With({"price"}, files));
  EXPECT_EQ(table.exit_code, 0) << table.out << table.err;
  EXPECT_THAT(table.out, AllOf(HasSubstr("2 phases"), HasSubstr("phase 0: "),
                               HasSubstr("phase 1: ")));
  const CliResult json = RunCli(With({"price", "--format=json"}, files));
  ASSERT_EQ(json.exit_code, 0) << json.out << json.err;
  const Json priced = Json::parse(json.out);
  EXPECT_EQ(priced["strategy"], "dcp-phased");
  ASSERT_EQ(priced["phases"].size(), 2u);
  EXPECT_EQ(priced["phases"][1]["groups"].size(), 8u);
  // The step is the phases' slowest groups plus the exposed all-reduce
  // plus the optimizer step (the llama3-8b default: tens of ms).
  EXPECT_GT(priced["optimizer_step_seconds"].get<double>(), 10e-3);
  EXPECT_NEAR(priced["step_seconds"].get<double>(),
              priced["phases"][0]["seconds"].get<double>() +
                  priced["phases"][1]["seconds"].get<double>() +
                  priced["exposed_allreduce_seconds"].get<double>() +
                  priced["optimizer_step_seconds"].get<double>(),
              1e-9);
  EXPECT_GT(priced["lower_bound_seconds"].get<double>(), 0);
  EXPECT_LE(priced["lower_bound_seconds"].get<double>(),
            priced["step_seconds"].get<double>());
  EXPECT_EQ(RunCli(With({"price", "--format=svg"}, files)).exit_code, 2);
  EXPECT_THAT(RunCli({"validate", "--help"}).out, HasSubstr("\"phases\""));

  // A sequence in two phases.
  WriteFile(plan_path, TwoPhasePlanJson(", 3", idle_rank_7));
  const CliResult twice = RunCli(With({"validate"}, files));
  EXPECT_EQ(twice.exit_code, 1);
  EXPECT_THAT(twice.out, HasSubstr("sequence 3 is planned twice (phases 0 "
                                   "and 1)"));
  // A phase whose groups leave rank 7 out.
  WriteFile(plan_path, TwoPhasePlanJson("", ""));
  const CliResult uncovered = RunCli(With({"validate"}, files));
  EXPECT_EQ(uncovered.exit_code, 1);
  EXPECT_THAT(uncovered.out, AllOf(HasSubstr("phase 1"), HasSubstr("7")));
  // A micro-batch over the memory budget: the 64K sequence alone on SP 1.
  WriteFile(lengths_path, "1000\n65536\n2000\n1500\n3000\n800\n1200\n900\n");
  WriteFile(plan_path, TwoPhasePlanJson("", idle_rank_7));
  const CliResult memory = RunCli(With({"validate"}, files));
  EXPECT_EQ(memory.exit_code, 1);
  EXPECT_THAT(memory.out, AllOf(HasSubstr("phase 1"), HasSubstr("memory")));
}

// `dcp plan --strategy=dcp-phased` on one very long sequence among many
// short ones: two phases, in the JSON that `dcp validate` and `dcp price`
// read back, priced as the plan predicted.
TEST(CliTest, PlansPhasesThatValidateAndPriceRead) {
  const std::string lengths_path = WriteLongAmongShortLengths(
      "planned_phases_lengths.txt", {65536}, /*short_count=*/63);
  const std::string plan_path = TempPath("planned_phases_plan.json");
  const std::vector<std::string> setup = OneNodeBatch(lengths_path);
  const CliResult plan =
      RunCli(With({"plan", "--strategy=dcp-phased", "--format=json"}, setup));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const Json planned = Json::parse(plan.out);
  EXPECT_EQ(planned["strategy"], "dcp-phased");
  ASSERT_EQ(planned["phases"].size(), 2u) << plan.out;
  EXPECT_GT(planned["lower_bound_seconds"].get<double>(), 0);
  WriteFile(plan_path, plan.out);
  EXPECT_THAT(
      ExpectValidatesAndPricesAsPlanned(plan_path, lengths_path, planned),
      AllOf(HasSubstr("plan is valid: 2 phase(s)"),
            HasSubstr("64 sequence(s)")));

  // The one-layout dcp plan of the batch is predicted slower.
  const CliResult one_layout =
      RunCli(With({"plan", "--strategy=dcp", "--format=json"}, setup));
  ASSERT_EQ(one_layout.exit_code, 0) << one_layout.err;
  EXPECT_LT(planned["predicted_step_seconds"].get<double>(),
            Json::parse(one_layout.out)["predicted_step_seconds"]
                .get<double>());

  const CliResult table =
      RunCli(With({"plan", "--strategy=dcp-phased", "--format=table"}, setup));
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, AllOf(HasSubstr("2 phases"), HasSubstr("phase 1: ")));
  const CliResult svg =
      RunCli(With({"plan", "--strategy=dcp-phased", "--format=svg"}, setup));
  EXPECT_EQ(svg.exit_code, 2);
  EXPECT_THAT(svg.err, HasSubstr("--format=svg"));
}

// Every strategy `dcp plan` writes, the peers' included, is read back by
// `dcp validate` and `dcp price` without edits, at the price it was
// planned at (megatron-dyncp's rounds without barriers too).
TEST(CliTest, EveryStrategysPlanValidatesAndPricesAsPlanned) {
  const std::string lengths_path = WriteLongAmongShortLengths(
      "every_strategy_lengths.txt", {65536, 32768}, /*short_count=*/40);
  const std::vector<std::string> setup = OneNodeBatch(lengths_path);
  for (const char* strategy :
       {"bucket", "packed", "best-static", "megatron-dyncp", "megatron-hcp",
        "videosys-dcp", "dcp", "dcp-one-layout", "dcp-fixed-accum",
        "dcp-uniform-recompute", "dcp-phased"}) {
    SCOPED_TRACE(strategy);
    const CliResult plan = RunCli(With(
        {"plan", absl::StrCat("--strategy=", strategy), "--format=json"},
        setup));
    ASSERT_EQ(plan.exit_code, 0) << plan.err;
    const Json planned = Json::parse(plan.out);
    EXPECT_EQ(planned["strategy"], strategy);
    if (std::string(strategy) == "megatron-dyncp") {
      EXPECT_EQ(planned["barriers"], false) << plan.out;
    } else {
      EXPECT_FALSE(planned.contains("barriers")) << plan.out;
    }
    const std::string plan_path =
        TempPath(absl::StrCat("every_strategy_", strategy, ".json"));
    WriteFile(plan_path, plan.out);
    ExpectValidatesAndPricesAsPlanned(plan_path, lengths_path, planned);
  }
}

}  // namespace
}  // namespace dcp
