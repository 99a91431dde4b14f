// The `dcp` command line: flag tables and the runners of simulate, plan and
// timeline; validate and price (the plan-file subcommands) are in
// planner/cli/cli_plan_file.cc, the loaders they all share in
// planner/cli/cli_support.cc. Every figure they print is computed in the
// libraries they call.

#include "planner/cli/cli.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/command_line.h"
#include "common/main_prologue.h"
#include "common/status_macros.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_cluster_flags.h"
#include "cost_model/model_spec.h"
#include "planner/strategies/baselines.h"
#include "planner/plan/batch_check.h"
#include "planner/cli/cli_plan_file.h"
#include "planner/cli/cli_support.h"
#include "planner/plan/limits.h"
#include "planner/search/lower_bound.h"
#include "planner/plan/phased_plan.h"
#include "planner/search/phased_planner.h"
#include "planner/plan/plan.h"
#include "planner/plan/plan_json.h"
#include "planner/simulate/plan_export.h"
#include "planner/simulate/plan_price.h"
#include "planner/simulate/strategy_registry.h"
#include "planner/plan/plan_table.h"
#include "planner/search/planner.h"
#include "planner/service/recorded_timeline.h"
#include "planner/service/step_state_files.h"
#include "planner/simulate/simulator.h"
#include "planner/simulate/strategy_report.h"
#include "planner/simulate/timeline.h"
#include "planner/simulate/timeline_svg.h"
#include "planner/plan/validate.h"
#include "planner/workload/workload.h"

namespace dcp {
namespace {

using cli::Command;
using cli::kGiB;
using cli::LoadCostModel;
using cli::LoadStrategyOptions;
using cli::LoadStream;
using cli::ModelCluster;
using cli::RunPrice;
using cli::RunValidate;
using cli::SpSizes;

// `dcp plan` prints the planner's progress on stderr from this many
// sequences in the batch (they take a second or more).
constexpr int64_t kProgressBatchSequences = int64_t{1} << 17;

// ---------------------------------------------------------------------------
// Flag tables: the subcommands' flags, with the model and cluster flags of
// cost_model/model_cluster_flags.h.

constexpr FlagSpec kWorkloadFlags[] = {
    {"workload", "SPEC", "longtail",
     "sequence-length distribution: longtail, uniform, bimodal, video or "
     "file:PATH, optionally KIND:key=value,..."},
    {"lengths", "FILE", "",
     "read lengths from FILE (one per line) instead of --workload"},
    {"seed", "S", "1", "seed of the workload"},
    {"global-batch-tokens", "T", "",
     "tokens per global batch; K and M suffixes mean 1024 and 1048576 "
     "(default: 64K x number of GPUs)"},
    {"global-batch-samples", "B", "",
     "sequences per global batch, instead of --global-batch-tokens"},
};

constexpr FlagSpec kStrategyFlags[] = {
    {"sp-sizes", "1,2,4", "",
     "SP sizes the planner may use (default: every legal size)"},
    {"bucket-micro-batch-sequences", "M", "1",
     "sequences per micro-batch of the bucket baseline"},
    {"static-sp", "S", "0",
     "SP size of the static baselines; 0 picks the smallest on which the "
     "workload's longest sequence fits memory"},
};

constexpr FlagSpec kValidateFlags[] = {
    {"plan", "FILE", "", "the plan JSON (required)"},
    {"lengths", "FILE", "", "the batch's lengths, one per line (required)"},
};

// Help texts that list the strategies; the flag tables point into them.
const std::string& StrategiesHelp() {
  static const auto* const help = new std::string(absl::StrCat(
      "strategies to compare, of ",
      absl::StrJoin(StrategyNames(), ","),
      " (default: ", absl::StrJoin(SimulationOptions().strategies, ","), ")"));
  return *help;
}
const std::string& StrategyHelp() {
  static const auto* const help = new std::string(absl::StrCat(
      "one of ", absl::StrJoin(StrategyNames(), ", "),
      "; dcp re-groups the ranks within a step where two phases are "
      "predicted faster than one layout (dcp-one-layout never does), and "
      "dcp-phased, megatron-dyncp, megatron-hcp and videosys-dcp always "
      "may: such plans are written with \"phases\" (JSON for `dcp "
      "validate` and `dcp price`; no svg); "
      "a strategy tuned over a run (best-static, the Megatron caps) is "
      "tuned on this one batch"));
  return *help;
}

// The flags of a subcommand that plans a workload stream's batches: the
// workload, model, cluster and strategy flags, then `own`.
const std::vector<FlagSpec>* StreamFlags(absl::Span<const FlagSpec> own) {
  return new std::vector<FlagSpec>(ConcatFlagTables(
      {kWorkloadFlags, ModelCluster().specs(), cli::kShardingFlags,
       kStrategyFlags, own}));
}

const std::vector<FlagSpec>& SimulateFlags() {
  static const auto* const flags = [] {
    const FlagSpec own[] = {
        {"steps", "K", "20", "global batches to simulate"},
        {"strategies", "a,b", "", StrategiesHelp().c_str()},
        {"megatron-recompute", "run|micro-batch", "run",
         "megatron-hcp's recompute: one --recompute-num-layers for the "
         "run, tuned with its cap (as Megatron-LM has), or the fewest layers "
         "each micro-batch needs (more generous than Megatron-LM)"},
        {"format", "table|json", "table", "output format"},
        {"report", "DIR", "",
         "also write DIR/index.html: a self-contained page with the "
         "workload's length histogram, every strategy's step-time "
         "distribution, speedups against the best static strategy simulated "
         "and bucket, idle fraction, memory, and the timeline of each "
         "strategy's median batch (keeps every plan in memory)"},
        {"write-plans", "DIR", "",
         "also write every strategy's plan of every step as "
         "DIR/STRATEGY/step_K.json (K from 0: the batch `dcp plan --step=K` "
         "plans), in the JSON of `dcp plan --format=json` that `dcp "
         "validate` and `dcp price` read, and each step's lengths as "
         "DIR/lengths/step_K.txt for their --lengths (keeps every plan in "
         "memory)"},
    };
    return StreamFlags(own);
  }();
  return *flags;
}

const std::vector<FlagSpec>& PlanFlags() {
  static const auto* const flags = [] {
    const FlagSpec own[] = {
        {"step", "K", "0", "plan the K-th batch of the stream, from 0"},
        {"strategy", "NAME", "dcp", StrategyHelp().c_str()},
        {"format", "json|table|svg", "json",
         "output format; svg draws the plan's timeline: a row per SP group, "
         "each micro-batch split into forward, recompute, backward and "
         "all-to-all, waiting in grey, the exposed all-reduce, the optimizer "
         "step and the lower bound"},
        {"write-lengths", "FILE", "",
         "also write the batch's lengths to FILE, one per line, for `dcp "
         "validate --lengths`"},
    };
    return StreamFlags(own);
  }();
  return *flags;
}

constexpr FlagSpec kPriceFlags[] = {
    {"plan", "FILE", "",
     "the plan JSON (required), as `dcp plan --format=json` writes it: any "
     "plan, whoever made it"},
    {"lengths", "FILE", "", "the batch's lengths, one per line (required)"},
    {"sp-sizes", "1,2,4", "",
     "SP sizes the lower bound may use (default: every legal size)"},
    {"format", "table|json|svg", "table",
     "output format; svg draws the priced plan's timeline"},
};

const std::vector<FlagSpec>& PriceFlags() {
  static const auto* const flags = new std::vector<FlagSpec>(
      ConcatFlagTables(
          {kPriceFlags, ModelCluster().specs(), cli::kShardingFlags}));
  return *flags;
}

const std::vector<FlagSpec>& ValidateFlags() {
  static const auto* const flags = new std::vector<FlagSpec>(
      ConcatFlagTables(
          {kValidateFlags, ModelCluster().specs(), cli::kShardingFlags}));
  return *flags;
}

constexpr FlagSpec kTimelineFlags[] = {
    {"state-dir", "DIR", "",
     "the planner's state directory (dcp_planner --state-dir; required), "
     "read only, also while the planner runs"},
    {"step", "K", "",
     "the step to draw (required): one of the planner's plan-cache window"},
    {"out", "FILE", "", "write the SVG to FILE (default: standard output)"},
    {"max-rows", "N", "256",
     "rows drawn at most; beyond it, groups of one SP size share a row"},
};

const std::vector<SubcommandSpec>& Subcommands() {
  static const auto* const subcommands = new std::vector<SubcommandSpec>{
      {"simulate",
       "compare the strategies' predicted step times over a batch stream",
       "Plans --steps global batches of the workload with each strategy, "
       "predicts every plan with the cost model, and prints each strategy's "
       "mean step time, speedup over bucket, idle fraction, peak memory, "
       "gap to the lower bound and phases per step. Peers: megatron-dyncp is "
       "Megatron-LM's dev-branch dynamic CP (each group's sequences packed "
       "into one micro-batch, CP sizes tried from the smallest upward, the "
       "placement of least projected rank load; rounds without barriers), "
       "its per-rank cap tuned over these batches; megatron-hcp is "
       "Megatron-LM's main-branch hybrid context-parallel scheduler (CP size per "
       "sub-sample = next power of two of length over a per-rank token cap, "
       "one micro-batch per sub-sample, rounds balanced by length^2/CP), its "
       "cap and its one recompute setting tuned over these batches; "
       "videosys-dcp is VideoSys's DCP-inter with PAC (per-bucket SP and "
       "batch size from a cost-model profile, one bucket per group, "
       "accumulation balanced by predicted time). Both re-group the ranks "
       "within a step, and are priced honestly for it: a step is a sequence "
       "of phases (Megatron's rounds, VideoSys's iterations) separated by "
       "barriers, so it lasts the sum of each phase's slowest group, plus "
       "the part of the one gradient all-reduce that the last phase's "
       "slowest group's last backward does not hide. Their SP sizes are "
       "this cost model's legal Ulysses sizes. dcp is what the planner "
       "service serves: for a batch whose one-layout plan is at least 3% "
       "above the lower bound it also searches plans that re-group the "
       "ranks within the step (the longest sequences with some fillers in "
       "a first phase, the rest on a fresh layout after a barrier, priced "
       "the same way) and keeps the one-layout plan unless two phases are "
       "predicted faster. dcp-one-layout never re-groups, dcp-phased "
       "searches phases for every batch (neither run unless named in "
       "--strategies).",
       SimulateFlags()},
      {"plan", "plan one global batch and print the plan",
       "Plans one global batch (the --step-th batch of the workload stream, "
       "or the lengths in --lengths=FILE) with one strategy and prints the "
       "plan with its predictions and the lower bound. Batches of 131,072 "
       "sequences or more print the search's progress on stderr.",
       PlanFlags()},
      {"validate", "check a plan file against a batch, model and cluster",
       "Reads a plan written by `dcp plan --format=json` and checks it "
       "independently of the planner: every sequence planned once, legal SP "
       "groups covering every rank, and every micro-batch within memory. "
       "A plan with \"phases\" (re-grouping the ranks within the step: "
       "each phase a list of groups as in \"groups\", sequence indices "
       "into the whole batch) is checked as a whole: every sequence in "
       "exactly one phase, each phase's groups a legal layout of every "
       "rank, every micro-batch within memory. Exits 0 if it is valid, 1 if "
       "not.",
       ValidateFlags()},
      {"price", "price any plan with the cost model",
       "Reads a plan in the JSON of `dcp plan --format=json` (one the "
       "planner did not make: a user's current configuration, another "
       "system's schedule), checks it as `dcp validate` does, and prints the "
       "cost model's step time, per-group times and waiting, idle fraction, "
       "peak memory and the gap to the lower bound. The plan's own "
       "predictions are ignored. A plan with \"phases\" is priced as a "
       "sum of each phase's slowest group (a world barrier ends each) plus "
       "the exposed all-reduce, per phase and group (table or json; svg "
       "draws one layout only). Exits 1 for an invalid plan.",
       PriceFlags()},
      {"timeline", "draw a step the planner ran: predicted vs measured",
       "Reads step K's plan, the cost model it was priced with and its ranks' "
       "step reports from a planner's state directory and draws the step's "
       "timeline as `dcp plan --format=svg` does, with each group's measured "
       "micro-batches (the mean of its ranks' compute + all-to-all) in the "
       "lower half of its row. A step without recorded reports is drawn "
       "predicted only, and says so.",
       kTimelineFlags},
  };
  return *subcommands;
}

const SubcommandProgramSpec& Program() {
  static const auto* const program = new SubcommandProgramSpec{
      "dcp",
      "dcp: the data-centric parallel planner for variable-length sequences.",
      Subcommands()};
  return *program;
}

// ---------------------------------------------------------------------------
// Subcommands.

int RunSimulate(const ParsedFlags& flags, Command& command) {
  absl::StatusOr<CostModel> cost_model = LoadCostModel(flags);
  if (!cost_model.ok())
    return command.UsageError(cost_model.status().message());
  absl::StatusOr<BatchStream> stream =
      LoadStream(flags, cost_model->cluster().NumGpus());
  if (!stream.ok()) return command.UsageError(stream.status().message());
  SimulationOptions options;
  if (absl::Status status = LoadStrategyOptions(
          flags, *cost_model, options.static_options, options.planner_options);
      !status.ok()) {
    return command.UsageError(status.message());
  }
  absl::StatusOr<int64_t> steps = flags.IntWithSuffix("steps", 1, 1'000'000);
  if (!steps.ok()) return command.UsageError(steps.status().message());
  options.steps = static_cast<int>(*steps);
  absl::StatusOr<std::vector<std::string>> strategies =
      flags.Given("strategies") ? flags.StringList("strategies")
                                : SimulationOptions().strategies;
  if (!strategies.ok())
    return command.UsageError(strategies.status().message());
  const std::vector<std::string> known = StrategyNames();
  for (const std::string& name : *strategies) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return command.UsageError(
          absl::StrCat("--strategies: unknown strategy '", name,
                       "'; valid strategies: ", absl::StrJoin(known, ", ")));
    }
  }
  options.strategies = *strategies;
  absl::StatusOr<std::string> megatron_recompute =
      flags.Choice("megatron-recompute", {"run", "micro-batch"});
  if (!megatron_recompute.ok())
    return command.UsageError(megatron_recompute.status().message());
  options.megatron_least_recompute_per_micro_batch =
      *megatron_recompute == "micro-batch";
  absl::StatusOr<std::string> format =
      flags.Choice("format", {"table", "json"});
  if (!format.ok()) return command.UsageError(format.status().message());
  const std::string report_directory = flags.String("report");
  const std::string plans_directory = flags.String("write-plans");
  options.keep_plans = !report_directory.empty() || !plans_directory.empty();
  // Before the simulation, which may take long.
  if (!plans_directory.empty()) {
    if (absl::Status status = CreatePlanExportDirectory(plans_directory);
        !status.ok()) {
      return command.Failure(
          absl::StrCat("--write-plans: ", status.message()));
    }
  }

  const bool err_is_tty = &command.err() == &std::cerr && isatty(STDERR_FILENO);
  auto progress = [&](int step, int total) {
    if (err_is_tty) {
      command.err() << "\rstep " << step << "/" << total
                    << (step == total ? "\n" : "") << std::flush;
    } else if (total >= 10 && step * 10 / total > (step - 1) * 10 / total) {
      command.err() << "step " << step << "/" << total << "\n";
    }
  };
  absl::StatusOr<SimulationReport> report = Simulate(
      *cost_model, *stream, options, RealClock::Get(), std::move(progress));
  if (!report.ok()) return command.Failure(report.status().message());
  if (*format == "json") {
    command.out() << SimulationReportToJson(*report) << "\n";
  } else {
    command.out() << SimulationReportToTable(*report);
  }
  if (!report_directory.empty()) {
    if (absl::Status status =
            WriteStrategyReport(report_directory, *report, *cost_model);
        !status.ok()) {
      return command.Failure(status.message());
    }
    command.err() << "wrote " << report_directory << "/index.html\n";
  }
  if (!plans_directory.empty()) {
    absl::StatusOr<int> written =
        WriteSimulatedPlans(plans_directory, *report, *cost_model);
    if (!written.ok()) {
      return command.Failure(
          absl::StrCat("--write-plans: ", written.status().message()));
    }
    command.err() << "wrote " << *written << " plans to " << plans_directory
                  << "\n";
  }
  return kExitOk;
}

// `dcp plan` of a strategy that re-groups within a step: its plan (lower
// bound filled) as PhasedPlanToJson's JSON (`json`), else as `dcp price`
// prints it.
int WritePhasedPlan(const CostModel& cost_model,
                    const std::vector<int64_t>& lengths_tokens,
                    const std::vector<int>& sp_sizes, const PhasedPlan& plan,
                    bool json, Command& command) {
  if (json) {
    command.out() << PhasedPlanToJson(plan, lengths_tokens, cost_model)
                  << "\n";
    return kExitOk;
  }
  absl::StatusOr<PhasedPlanPrice> price =
      PricePhasedPlan(cost_model, lengths_tokens, plan, sp_sizes);
  if (!price.ok()) return command.Failure(price.status().message());
  command.out() << PhasedPlanPriceToTable(*price);
  return kExitOk;
}

int RunPlan(const ParsedFlags& flags, Command& command) {
  absl::StatusOr<CostModel> cost_model = LoadCostModel(flags);
  if (!cost_model.ok())
    return command.UsageError(cost_model.status().message());
  StaticOptions static_options;
  PlannerOptions planner_options;
  if (absl::Status status = LoadStrategyOptions(
          flags, *cost_model, static_options, planner_options);
      !status.ok()) {
    return command.UsageError(status.message());
  }
  absl::StatusOr<std::string> strategy =
      flags.Choice("strategy", StrategyNames());
  if (!strategy.ok()) return command.UsageError(strategy.status().message());
  absl::StatusOr<std::string> format =
      flags.Choice("format", {"json", "table", "svg"});
  if (!format.ok()) return command.UsageError(format.status().message());
  absl::StatusOr<int64_t> step = flags.IntWithSuffix("step", 0, 1'000'000);
  if (!step.ok()) return command.UsageError(step.status().message());

  std::vector<int64_t> lengths_tokens;
  if (flags.Given("lengths")) {
    for (const char* stream_flag :
         {"workload", "step", "seed", "global-batch-tokens",
          "global-batch-samples"}) {
      if (flags.Given(stream_flag)) {
        return command.UsageError(absl::StrCat(
            "--", stream_flag,
            " applies to a workload stream; with --lengths=FILE the file is "
            "the batch"));
      }
    }
    absl::StatusOr<std::vector<int64_t>> list =
        ReadLengthsFile(flags.String("lengths"));
    if (!list.ok()) return command.UsageError(list.status().message());
    // Refused before any planning starts (planner/plan/limits.h).
    if (static_cast<int64_t>(list->size()) > kMaxBatchSequences) {
      return command.UsageError(
          absl::StrCat("--lengths=", flags.String("lengths"), ": ",
                       list->size(), " sequences; at most ", kMaxBatchSequences,
                       " (2^20) can be planned as one batch: split the file"));
    }
    lengths_tokens = *std::move(list);
  } else {
    absl::StatusOr<BatchStream> stream =
        LoadStream(flags, cost_model->cluster().NumGpus());
    if (!stream.ok()) return command.UsageError(stream.status().message());
    static_options.workload_max_length_tokens =
        stream->source().MaxLengthTokens();
    std::vector<Sample> batch;
    for (int64_t i = 0; i <= *step; ++i) batch = stream->Next();
    for (const Sample& sample : batch) {
      lengths_tokens.push_back(sample.length_tokens);
    }
  }

  // Large batches take seconds to plan: say what the search has done.
  const absl::Time planning_start = RealClock::Get().Now();
  if (static_cast<int64_t>(lengths_tokens.size()) >= kProgressBatchSequences) {
    planner_options.progress = [&](const PlanningProgress& progress) {
      command.err() << "dcp plan: " << progress.message << " ("
                    << absl::StrFormat(
                           "%.1f", absl::ToDoubleSeconds(
                                       RealClock::Get().Now() - planning_start))
                    << " s)\n";
    };
  }
  if (flags.Given("write-lengths")) {
    const std::string path = flags.String("write-lengths");
    std::ofstream file(path);
    for (int64_t length : lengths_tokens) file << length << "\n";
    file.close();
    if (!file) {
      return command.Failure(
          absl::StrCat("--write-lengths=", path, ": cannot write the file"));
    }
  }
  StrategyOptions strategy_options;
  strategy_options.static_options = static_options;
  strategy_options.planner_options = planner_options;  // with progress
  absl::StatusOr<std::unique_ptr<Strategy>> made =
      MakeStrategy(*strategy, *cost_model, strategy_options);
  if (!made.ok()) return command.UsageError(made.status().message());
  absl::StatusOr<std::vector<int>> sp_sizes =
      LegalSpSizes(*cost_model, planner_options.sp_sizes);
  if (!sp_sizes.ok()) return command.Failure(sp_sizes.status().message());
  absl::StatusOr<double> lower_bound =
      StepTimeLowerBound(*cost_model, *sp_sizes, lengths_tokens);
  if (!lower_bound.ok()) return command.Failure(lower_bound.status().message());
  absl::StatusOr<StrategyPlan> planned = (*made)->PlanBatch(lengths_tokens);
  if (!planned.ok()) return command.Failure(planned.status().message());
  if (planned->IsPhased() && *format == "svg") {
    return command.UsageError(absl::StrCat(
        "--format=svg draws plans of one layout; this batch's --strategy=",
        *strategy,
        " plan re-groups the ranks within the step: write json or table, or "
        "plan with --strategy=dcp-one-layout"));
  }
  if (planned->IsPhased()) {
    planned->phased.lower_bound_seconds = *lower_bound;
    return WritePhasedPlan(*cost_model, lengths_tokens, *sp_sizes,
                           planned->phased, *format == "json", command);
  }
  Plan& plan = planned->plan;
  plan.lower_bound_seconds = *lower_bound;

  if (*format == "json") {
    command.out() << PlanToJson(plan, lengths_tokens, *cost_model) << "\n";
  } else if (*format == "svg") {
    absl::StatusOr<Timeline> timeline =
        BuildTimeline(*cost_model, lengths_tokens, plan);
    if (!timeline.ok()) return command.Failure(timeline.status().message());
    command.out() << RenderTimelineSvg(*timeline);
  } else {
    command.out() << PlanToTable(plan, lengths_tokens, *cost_model);
  }
  return kExitOk;
}

int RunTimeline(const ParsedFlags& flags, Command& command) {
  for (const char* required : {"state-dir", "step"}) {
    if (!flags.Given(required)) {
      return command.UsageError(absl::StrCat("--", required, " is required"));
    }
  }
  absl::StatusOr<int64_t> step = flags.Int("step", /*min=*/0);
  if (!step.ok()) return command.UsageError(step.status().message());
  absl::StatusOr<int64_t> max_rows =
      flags.Int("max-rows", /*min=*/1, /*max=*/1 << 20);
  if (!max_rows.ok()) return command.UsageError(max_rows.status().message());
  const std::string directory = flags.String("state-dir");
  absl::StatusOr<RecordedStep> recorded = ReadRecordedStep(directory, *step);
  if (!recorded.ok()) {
    // No such directory or step: the command line names the wrong thing.
    const absl::StatusCode code = recorded.status().code();
    return code == absl::StatusCode::kNotFound ||
                   code == absl::StatusCode::kFailedPrecondition
               ? command.UsageError(recorded.status().message())
               : command.Failure(recorded.status().message());
  }
  TimelineOptions options;
  options.max_rows = static_cast<int>(*max_rows);
  absl::StatusOr<RecordedTimeline> laid_out =
      LayOutRecordedStep(*recorded, options);
  if (!laid_out.ok()) return command.Failure(laid_out.status().message());
  TimelineSvgOptions svg;
  svg.title = absl::StrCat(
      "step ", *step, " of ", directory,
      laid_out->reported_ranks.empty()
          ? ": predicted (no measured reports recorded)"
          : ": predicted (upper half of each row) vs measured (lower half)");
  const std::string picture = RenderTimelineSvg(laid_out->timeline, svg);
  const std::string line = DescribeRecordedTimeline(*laid_out);
  if (!flags.Given("out")) {
    command.out() << picture;
    command.err() << line << "\n";
    return kExitOk;
  }
  if (absl::Status written = WriteFileAtomically(flags.String("out"), picture);
      !written.ok()) {
    return command.Failure(written.message());
  }
  command.out() << line << "; wrote " << flags.String("out") << "\n";
  return kExitOk;
}

}  // namespace

int RunDcpCli(int argc, char** argv, std::ostream& out, std::ostream& err) {
  const SubcommandMainStart start =
      StartSubcommandMain(Program(), argc, argv, out, err);
  if (!start.flags.has_value()) return start.exit_code;
  Command command(*start.subcommand, out, err);
  const absl::string_view name = start.subcommand->name;
  if (name == "simulate") return RunSimulate(*start.flags, command);
  if (name == "plan") return RunPlan(*start.flags, command);
  if (name == "price") return RunPrice(*start.flags, command);
  if (name == "timeline") return RunTimeline(*start.flags, command);
  return RunValidate(*start.flags, command);
}

}  // namespace dcp
