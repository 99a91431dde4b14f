// The plan files of the `dcp` command line: what plan and simulate write,
// validate and price read back (plans of one layout and of phases, from
// every strategy), and the plans they must refuse (corrupted fields, derived
// fields that contradict the plan).

#include "planner/cli/cli.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Json = nlohmann::json;

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
  WriteTestFile(path, text);
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

// Reads into `planned` the plan a simulation wrote to `plan_path` (a fatal
// failure if it wrote none), which must be `strategy`'s and must validate
// and price as planned (ExpectValidatesAndPricesAsPlanned) for the batch of
// `lengths_path` on `nodes` nodes of 8 GPUs.
void ExpectWrittenPlanValidatesAndPrices(const std::string& plan_path,
                                         const std::string& lengths_path,
                                         const std::string& strategy, int nodes,
                                         Json& planned) {
  const std::string text = ReadTestFile(plan_path);
  ASSERT_FALSE(text.empty()) << plan_path;
  planned = Json::parse(text);
  EXPECT_EQ(planned["strategy"], strategy);
  ExpectValidatesAndPricesAsPlanned(plan_path, lengths_path, planned, nodes);
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
      Json planned;
      ASSERT_NO_FATAL_FAILURE(ExpectWrittenPlanValidatesAndPrices(
          absl::StrCat(directory, "/", strategy, "/step_", step, ".json"),
          absl::StrCat(directory, "/lengths/step_", step, ".txt"), strategy,
          /*nodes=*/1, planned));
    }
  }
  // The batch of step 1 is the one `dcp plan --step=1` plans.
  const CliResult plan = RunCli(With(
      {"plan", "--strategy=packed", "--step=1", "--format=json"}, kSmallSetup));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_EQ(Json::parse(plan.out)["num_sequences"].get<int>(),
            CountLines(ReadTestFile(
                absl::StrCat(directory, "/lengths/step_1.txt"))));

  // A file where the directory should be: a failure naming it, before
  // anything is simulated.
  const std::string blocker = TempPath("write_plans_blocker");
  WriteTestFile(blocker, "x");
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
    Json planned;
    ASSERT_NO_FATAL_FAILURE(ExpectWrittenPlanValidatesAndPrices(
        absl::StrCat(directory, "/dcp/step_", step, ".json"),
        absl::StrCat(directory, "/lengths/step_", step, ".txt"), "dcp",
        /*nodes=*/4, planned));
    EXPECT_NE(planned.contains("phases"), planned.contains("groups"));
    phased += planned.contains("phases") ? 1 : 0;
  }
  // Both kinds were written.
  EXPECT_GT(phased, 0);
  EXPECT_LT(phased, 6);
}

// The files WritePackedPlan writes, and the `dcp plan` run whose output is
// the plan.
struct PlannedFiles {
  std::string lengths_path;
  std::string plan_path;
  CliResult plan;
};

// Writes `lengths` (one per line) to "<name>_lengths.txt" and the `packed`
// plan of them on one node of 8 GPUs to "<name>_plan.json", temporary files.
PlannedFiles WritePackedPlan(const std::string& name,
                             const std::string& lengths) {
  PlannedFiles files{
      TempPath(name + "_lengths.txt"), TempPath(name + "_plan.json"), {}};
  WriteTestFile(files.lengths_path, lengths);
  files.plan =
      RunCli({"plan", "--nodes=1", "--gpus-per-node=8", "--strategy=packed",
              absl::StrCat("--lengths=", files.lengths_path)});
  WriteTestFile(files.plan_path, files.plan.out);
  return files;
}

TEST(CliTest, PriceAPlanFromAFile) {
  const PlannedFiles files = WritePackedPlan(
      "price", "4096\n1000\n30000\n512\n8192\n700\n2048\n12000\n");
  const std::vector<std::string> cluster = {"--nodes=1", "--gpus-per-node=8"};
  ASSERT_EQ(files.plan.exit_code, 0) << files.plan.err;
  const Json planned = Json::parse(files.plan.out);

  const CliResult json = RunCli(
      With({"price", "--format=json", absl::StrCat("--plan=", files.plan_path),
            absl::StrCat("--lengths=", files.lengths_path)},
           cluster));
  ASSERT_EQ(json.exit_code, 0) << json.err << json.out;
  const Json priced = Json::parse(json.out);
  EXPECT_DOUBLE_EQ(priced["step_seconds"].get<double>(),
                   planned["predicted_step_seconds"].get<double>());
  EXPECT_EQ(priced["strategy"], "packed");
  EXPECT_EQ(priced["groups"].size(), planned["groups"].size());

  const CliResult table =
      RunCli(With({"price", absl::StrCat("--plan=", files.plan_path),
                   absl::StrCat("--lengths=", files.lengths_path)},
                  cluster));
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_THAT(table.out, AllOf(HasSubstr("predicted step"), HasSubstr("idle")));
  const CliResult svg = RunCli(
      With({"price", "--format=svg", absl::StrCat("--plan=", files.plan_path),
            absl::StrCat("--lengths=", files.lengths_path)},
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
  WriteTestFile(files.lengths_path, "4096\n1000\n");
  const CliResult invalid =
      RunCli(With({"price", absl::StrCat("--plan=", files.plan_path),
                   absl::StrCat("--lengths=", files.lengths_path)},
                  cluster));
  EXPECT_EQ(invalid.exit_code, 1);
  EXPECT_THAT(invalid.out, HasSubstr("plan is invalid"));
  EXPECT_EQ(RunCli(With({"price"}, cluster)).exit_code, 2);
}

TEST(CliTest, PlanThenValidateRoundTrip) {
  const std::string lengths_path = TempPath("lengths.txt");
  const std::string plan_path = TempPath("plan.json");
  WriteTestFile(lengths_path,
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
  WriteTestFile(plan_path, plan.out);

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
  const std::vector<std::string> cluster = {"--nodes=1", "--gpus-per-node=8"};
  ASSERT_EQ(files.plan.exit_code, 0) << files.plan.err;
  const Json original = Json::parse(files.plan.out);
  for (const char* subcommand : {"validate", "price"}) {
    EXPECT_EQ(RunCli(With({subcommand, "--plan=" + files.plan_path,
                           "--lengths=" + files.lengths_path},
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
    WriteTestFile(files.plan_path, json.dump());
    for (const char* subcommand : {"validate", "price"}) {
      const CliResult result =
          RunCli(With({subcommand, "--plan=" + files.plan_path,
                       "--lengths=" + files.lengths_path},
                      cluster));
      EXPECT_EQ(result.exit_code, 1) << subcommand << " " << edit.path;
      EXPECT_THAT(result.out,
                  AllOf(HasSubstr("plan is invalid"), HasSubstr(edit.path)))
          << subcommand;
    }
  }
}

TEST(CliTest, CorruptedPlanFailsValidation) {
  const PlannedFiles files =
      WritePackedPlan("corrupt", "4096\n1000\n30000\n512\n8192\n");
  const std::vector<std::string> cluster = {"--nodes=1", "--gpus-per-node=8"};
  ASSERT_EQ(files.plan.exit_code, 0) << files.plan.err;
  Json json = Json::parse(files.plan.out);
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
  ASSERT_TRUE(corrupted) << files.plan.out;
  WriteTestFile(files.plan_path, json.dump());
  const CliResult result = RunCli(With({"validate", "--plan=" + files.plan_path,
                                        "--lengths=" + files.lengths_path},
                                       cluster));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.out, AllOf(HasSubstr("plan is invalid"),
                                HasSubstr("sequence 0 is planned twice")));

  // Not JSON at all, and a wrongly typed field.
  WriteTestFile(files.plan_path, "{\"strategy\": ");
  EXPECT_EQ(RunCli(With({"validate", "--plan=" + files.plan_path,
                         "--lengths=" + files.lengths_path},
                        cluster))
                .exit_code,
            1);
  json["groups"][0]["ranks"] = "all";
  WriteTestFile(files.plan_path, json.dump());
  const CliResult typed = RunCli(With({"validate", "--plan=" + files.plan_path,
                                       "--lengths=" + files.lengths_path},
                                      cluster));
  EXPECT_EQ(typed.exit_code, 1);
  EXPECT_THAT(typed.out, HasSubstr("groups[0].ranks"));

  // A plan file that does not exist is a usage error.
  EXPECT_EQ(RunCli(With({"validate", "--plan=/no/such/plan.json",
                         "--lengths=" + files.lengths_path},
                        cluster))
                .exit_code,
            2);
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
  WriteTestFile(lengths_path,
                "65536\n1000\n2000\n1500\n3000\n800\n1200\n900\n");
  const std::string idle_rank_7 =
      "{\"ranks\": [7], \"predicted_seconds\": 0, \"micro_batches\": []}";
  const std::vector<std::string> files = {
      "--nodes=1", "--gpus-per-node=8", absl::StrCat("--plan=", plan_path),
      absl::StrCat("--lengths=", lengths_path)};

  WriteTestFile(plan_path, TwoPhasePlanJson("", idle_rank_7));
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
  WriteTestFile(plan_path, TwoPhasePlanJson(", 3", idle_rank_7));
  const CliResult twice = RunCli(With({"validate"}, files));
  EXPECT_EQ(twice.exit_code, 1);
  EXPECT_THAT(twice.out, HasSubstr("sequence 3 is planned twice (phases 0 "
                                   "and 1)"));
  // A phase whose groups leave rank 7 out.
  WriteTestFile(plan_path, TwoPhasePlanJson("", ""));
  const CliResult uncovered = RunCli(With({"validate"}, files));
  EXPECT_EQ(uncovered.exit_code, 1);
  EXPECT_THAT(uncovered.out, AllOf(HasSubstr("phase 1"), HasSubstr("7")));
  // A micro-batch over the memory budget: the 64K sequence alone on SP 1.
  WriteTestFile(lengths_path,
                "1000\n65536\n2000\n1500\n3000\n800\n1200\n900\n");
  WriteTestFile(plan_path, TwoPhasePlanJson("", idle_rank_7));
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
  WriteTestFile(plan_path, plan.out);
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
    WriteTestFile(plan_path, plan.out);
    ExpectValidatesAndPricesAsPlanned(plan_path, lengths_path, planned);
  }
}

}  // namespace
}  // namespace dcp
