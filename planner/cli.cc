#include "planner/cli.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/clock.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_spec.h"
#include "planner/baselines.h"
#include "planner/batch_check.h"
#include "planner/lower_bound.h"
#include "planner/plan.h"
#include "planner/plan_json.h"
#include "planner/planner.h"
#include "planner/simulator.h"
#include "planner/timeline.h"
#include "planner/timeline_svg.h"
#include "planner/validate.h"
#include "planner/workload.h"

namespace dcp {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
// Default global batch: this many tokens per GPU.
constexpr int64_t kDefaultTokensPerGpu = 64 * 1024;

// ---------------------------------------------------------------------------
// Flag tables and parsing.

enum class FlagKind { kValue, kBool };

// One flag a subcommand accepts.
struct FlagSpec {
  std::string name;
  FlagKind kind = FlagKind::kValue;
  // Placeholder in the usage text, e.g. "N" in --nodes=N.
  std::string value_name;
  // One line of help, including the default.
  std::string help;
};

// A subcommand: its flags and what it does.
struct Subcommand {
  std::string name;
  std::string summary;
  std::string description;
  std::vector<FlagSpec> flags;
};

// The flags given to one subcommand, by name (without "--"); bool flags hold
// "true" or "false". Plain value.
using FlagValues = std::map<std::string, std::string>;

const std::vector<FlagSpec>& WorkloadFlags() {
  static const auto* const flags = new std::vector<FlagSpec>{
      {"workload", FlagKind::kValue, "SPEC",
       "sequence-length distribution: longtail, uniform, bimodal, video or "
       "file:PATH, optionally KIND:key=value,... (default: longtail)"},
      {"lengths", FlagKind::kValue, "FILE",
       "read lengths from FILE (one per line) instead of --workload"},
      {"seed", FlagKind::kValue, "S", "seed of the workload (default: 1)"},
      {"global-batch-tokens", FlagKind::kValue, "T",
       "tokens per global batch; K and M suffixes mean 1024 and 1048576 "
       "(default: 64K x number of GPUs)"},
      {"global-batch-samples", FlagKind::kValue, "B",
       "sequences per global batch, instead of --global-batch-tokens"},
  };
  return *flags;
}

const std::vector<FlagSpec>& ClusterFlags() {
  static const auto* const flags = new std::vector<FlagSpec>{
      {"model", FlagKind::kValue, "PRESET|FILE",
       absl::StrCat("model preset (", absl::StrJoin(ModelPresetNames(), ", "),
                    ") or model-spec JSON file (default: llama3-8b)")},
      {"nodes", FlagKind::kValue, "N", "nodes in the cluster (default: 4)"},
      {"gpus", FlagKind::kValue, "N",
       "GPUs in the cluster, instead of --nodes; must be a multiple of "
       "--gpus-per-node"},
      {"gpus-per-node", FlagKind::kValue, "G", "GPUs per node (default: 8)"},
      {"memory-fraction", FlagKind::kValue, "F",
       "fraction of each GPU's memory plans may use, in (0, 1] (default: "
       "0.8)"},
  };
  return *flags;
}

const std::vector<FlagSpec>& StrategyFlags() {
  static const auto* const flags = new std::vector<FlagSpec>{
      {"sp-sizes", FlagKind::kValue, "1,2,4",
       "SP sizes the planner may use (default: every legal size)"},
      {"bucket-micro-batch-sequences", FlagKind::kValue, "M",
       "sequences per micro-batch of the bucket baseline (default: 1)"},
      {"static-sp", FlagKind::kValue, "S",
       "SP size of the static baselines (default: the smallest on which the "
       "workload's longest sequence fits memory)"},
  };
  return *flags;
}

std::vector<FlagSpec> Concat(std::vector<std::vector<FlagSpec>> lists) {
  std::vector<FlagSpec> all;
  for (std::vector<FlagSpec>& list : lists) {
    for (FlagSpec& flag : list) all.push_back(std::move(flag));
  }
  return all;
}

const std::vector<Subcommand>& Subcommands() {
  static const auto* const subcommands = new std::vector<Subcommand>{
      {"simulate",
       "compare the strategies' predicted step times over a batch stream",
       "Plans --steps global batches of the workload with each strategy, "
       "predicts every plan with the cost model, and prints each strategy's "
       "mean step time, speedup over bucket, idle fraction, peak memory and "
       "gap to the lower bound.",
       Concat(
           {WorkloadFlags(),
            ClusterFlags(),
            StrategyFlags(),
            {{"steps", FlagKind::kValue, "K",
              "global batches to simulate (default: 20)"},
             {"strategies", FlagKind::kValue, "a,b",
              absl::StrCat("strategies to compare (default: all of ",
                           absl::StrJoin(SimulationStrategyNames(), ","), ")")},
             {"format", FlagKind::kValue, "table|json",
              "output format (default: table)"}}})},
      {"plan", "plan one global batch and print the plan",
       "Plans one global batch (the --step-th batch of the workload stream, "
       "or the lengths in --lengths=FILE) with one strategy and prints the "
       "plan with its predictions and the lower bound.",
       Concat({WorkloadFlags(),
               ClusterFlags(),
               StrategyFlags(),
               {{"step", FlagKind::kValue, "K",
                 "plan the K-th batch of the stream, from 0 (default: 0)"},
                {"strategy", FlagKind::kValue, "NAME",
                 absl::StrCat("one of ",
                              absl::StrJoin(SimulationStrategyNames(), ", "),
                              " (default: dcp)")},
                {"format", FlagKind::kValue, "json|table|svg",
                 "output format (default: json); svg draws the plan's "
                 "timeline: a row per SP group, each micro-batch split into "
                 "forward, recompute, backward and all-to-all, waiting in "
                 "grey, the exposed all-reduce and the lower bound"},
                {"write-lengths", FlagKind::kValue, "FILE",
                 "also write the batch's lengths to FILE, one per line, for "
                 "`dcp validate --lengths`"}}})},
      {"validate", "check a plan file against a batch, model and cluster",
       "Reads a plan written by `dcp plan --format=json` and checks it "
       "independently of the planner: every sequence planned once, legal SP "
       "groups covering every rank, and every micro-batch within memory. "
       "Exits 0 if it is valid, 1 if not.",
       Concat({{{"plan", FlagKind::kValue, "FILE", "the plan JSON (required)"},
                {"lengths", FlagKind::kValue, "FILE",
                 "the batch's lengths, one per line (required)"}},
               ClusterFlags()})},
  };
  return *subcommands;
}

const Subcommand* FindSubcommand(absl::string_view name) {
  for (const Subcommand& subcommand : Subcommands()) {
    if (subcommand.name == name) return &subcommand;
  }
  return nullptr;
}

// Wraps `text` at `width` columns, assuming it starts at column
// `start_column`; continuation lines are indented by `indent`.
std::string Wrap(absl::string_view text, size_t width, size_t start_column,
                 size_t indent) {
  std::string wrapped;
  size_t column = start_column;
  bool line_empty = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line_empty && column + 1 + word.size() > width) {
      absl::StrAppend(&wrapped, "\n", std::string(indent, ' '));
      column = indent;
      line_empty = true;
    }
    if (!line_empty) {
      wrapped += ' ';
      ++column;
    }
    absl::StrAppend(&wrapped, word);
    column += word.size();
    line_empty = false;
  }
  return wrapped;
}

std::string MainUsage() {
  std::string usage =
      "dcp: the data-centric parallel planner for variable-length "
      "sequences.\n\nUsage: dcp SUBCOMMAND [--flag=value ...]\n\n"
      "Subcommands:\n";
  for (const Subcommand& subcommand : Subcommands()) {
    absl::StrAppend(&usage, absl::StrFormat("  %-10s %s\n", subcommand.name,
                                            subcommand.summary));
  }
  absl::StrAppend(&usage, "\nRun `dcp SUBCOMMAND --help` for its flags.\n");
  return usage;
}

std::string SubcommandUsage(const Subcommand& subcommand) {
  std::string usage = absl::StrCat(
      "Usage: dcp ", subcommand.name, " [flags]\n\n",
      Wrap(subcommand.description, /*width=*/79, /*start_column=*/0,
           /*indent=*/0),
      "\n\nFlags (--name=value or --name value):\n");
  std::vector<std::string> left;
  size_t width = 0;
  for (const FlagSpec& flag : subcommand.flags) {
    left.push_back(flag.kind == FlagKind::kBool
                       ? absl::StrCat("--", flag.name)
                       : absl::StrCat("--", flag.name, "=", flag.value_name));
    width = std::max(width, left.back().size());
  }
  left.push_back("--help");
  for (size_t i = 0; i < left.size(); ++i) {
    const std::string help = i < subcommand.flags.size()
                                 ? subcommand.flags[i].help
                                 : "print this help and exit";
    const std::string head = absl::StrCat(
        "  ", left[i], std::string(width - left[i].size() + 2, ' '));
    absl::StrAppend(&usage, head,
                    Wrap(help, /*width=*/79, /*start_column=*/head.size(),
                         /*indent=*/head.size()),
                    "\n");
  }
  return usage;
}

bool IsHelp(absl::string_view arg) { return arg == "--help" || arg == "-h"; }

// Parses `args` (the arguments after the subcommand) against its flag table.
// Errors are usage errors naming the flag.
absl::StatusOr<FlagValues> ParseFlags(const Subcommand& subcommand,
                                      const std::vector<std::string>& args) {
  FlagValues values;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected argument '", arg, "'; flags look like --name=value"));
    }
    const size_t equals = arg.find('=');
    const std::string name = arg.substr(
        2, equals == std::string::npos ? std::string::npos : equals - 2);
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& flag : subcommand.flags) {
      if (flag.name == name) spec = &flag;
    }
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (values.count(name) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " is given more than once"));
    }
    std::string value;
    if (equals != std::string::npos) {
      value = arg.substr(equals + 1);
      if (spec->kind == FlagKind::kBool) {
        const std::string lower = absl::AsciiStrToLower(value);
        if (lower == "true" || lower == "1") {
          value = "true";
        } else if (lower == "false" || lower == "0") {
          value = "false";
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat("--", name, "=", value, ": must be true or false"));
        }
      }
    } else if (spec->kind == FlagKind::kBool) {
      value = "true";
    } else if (i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "flag --", name, " needs a value: --", name, "=", spec->value_name));
    }
    values[name] = std::move(value);
  }
  return values;
}

// ---------------------------------------------------------------------------
// Typed flag values. Every error names the flag and its value.

const std::string* Find(const FlagValues& flags, const std::string& name) {
  auto it = flags.find(name);
  return it == flags.end() ? nullptr : &it->second;
}

absl::Status BadValue(absl::string_view name, absl::string_view value,
                      absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, "=", value, ": ", problem));
}

// An integer with an optional K (1024) or M (1048576) suffix.
absl::StatusOr<int64_t> ParseInt(absl::string_view name,
                                 absl::string_view text) {
  absl::string_view digits = text;
  int64_t multiplier = 1;
  if (!digits.empty() && (digits.back() == 'K' || digits.back() == 'k')) {
    multiplier = int64_t{1} << 10;
    digits.remove_suffix(1);
  } else if (!digits.empty() &&
             (digits.back() == 'M' || digits.back() == 'm')) {
    multiplier = int64_t{1} << 20;
    digits.remove_suffix(1);
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value)) {
    return BadValue(name, text, "is not an integer");
  }
  if (value > std::numeric_limits<int64_t>::max() / multiplier ||
      value < std::numeric_limits<int64_t>::min() / multiplier) {
    return BadValue(name, text, "is too large");
  }
  return value * multiplier;
}

absl::StatusOr<int64_t> GetInt(const FlagValues& flags, const std::string& name,
                               int64_t default_value, int64_t min_value,
                               int64_t max_value, absl::string_view meaning) {
  const std::string* text = Find(flags, name);
  if (text == nullptr) return default_value;
  absl::StatusOr<int64_t> value = ParseInt(name, *text);
  if (!value.ok()) return value.status();
  if (*value < min_value) {
    return BadValue(
        name, *text,
        absl::StrCat("must be at least ", min_value, " (", meaning, ")"));
  }
  if (*value > max_value) {
    return BadValue(
        name, *text,
        absl::StrCat("must be at most ", max_value, " (", meaning, ")"));
  }
  return *value;
}

absl::StatusOr<std::string> GetChoice(const FlagValues& flags,
                                      const std::string& name,
                                      const std::string& default_value,
                                      const std::vector<std::string>& choices) {
  const std::string* text = Find(flags, name);
  if (text == nullptr) return default_value;
  if (std::find(choices.begin(), choices.end(), *text) == choices.end()) {
    return BadValue(
        name, *text,
        absl::StrCat("must be one of ", absl::StrJoin(choices, ", ")));
  }
  return *text;
}

absl::StatusOr<std::vector<std::string>> GetList(
    const FlagValues& flags, const std::string& name,
    std::vector<std::string> default_value) {
  const std::string* text = Find(flags, name);
  if (text == nullptr) return default_value;
  std::vector<std::string> items =
      absl::StrSplit(*text, ',', absl::SkipWhitespace());
  for (std::string& item : items) {
    item = std::string(absl::StripAsciiWhitespace(item));
  }
  if (items.empty()) {
    return BadValue(name, *text, "must list at least one item, e.g. a,b");
  }
  return items;
}

absl::StatusOr<std::vector<int>> GetIntList(const FlagValues& flags,
                                            const std::string& name) {
  absl::StatusOr<std::vector<std::string>> items = GetList(flags, name, {});
  if (!items.ok()) return items.status();
  std::vector<int> values;
  for (const std::string& item : *items) {
    int value = 0;
    if (!absl::SimpleAtoi(item, &value) || value <= 0) {
      return BadValue(name, *Find(flags, name),
                      absl::StrCat("'", item,
                                   "' is not a positive integer; give a "
                                   "comma-separated list such as 1,2,4,8"));
    }
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<std::string> ReadFile(absl::string_view flag,
                                     const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("--", flag, "=", path, ": cannot open the file"));
  }
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// ---------------------------------------------------------------------------
// Shared configuration from the flags; all errors are usage errors.

absl::StatusOr<CostModel> LoadCostModel(const FlagValues& flags) {
  const std::string* model_text = Find(flags, "model");
  absl::StatusOr<ModelSpec> model =
      LoadModelSpec(model_text == nullptr ? "llama3-8b" : *model_text);
  if (!model.ok()) return model.status();
  absl::StatusOr<int64_t> nodes =
      GetInt(flags, "nodes", 4, 1, 1 << 14, "the number of nodes");
  if (!nodes.ok()) return nodes.status();
  absl::StatusOr<int64_t> gpus_per_node = GetInt(
      flags, "gpus-per-node", 8, 1, 64, "the number of GPUs per node");
  if (!gpus_per_node.ok()) return gpus_per_node.status();
  if (const std::string* gpus_text = Find(flags, "gpus")) {
    if (Find(flags, "nodes") != nullptr) {
      return BadValue("gpus", *gpus_text,
                      "cannot be combined with --nodes; give one of them");
    }
    absl::StatusOr<int64_t> gpus =
        GetInt(flags, "gpus", 0, 1, int64_t{1} << 20, "the number of GPUs");
    if (!gpus.ok()) return gpus.status();
    if (*gpus % *gpus_per_node != 0) {
      return BadValue(
          "gpus", *gpus_text,
          absl::StrCat("is not a multiple of --gpus-per-node=", *gpus_per_node,
                       "; use whole nodes, e.g. --gpus=",
                       (*gpus / *gpus_per_node + 1) * *gpus_per_node));
    }
    nodes = *gpus / *gpus_per_node;
  }
  ClusterSpec cluster =
      H200Cluster(static_cast<int>(*nodes), static_cast<int>(*gpus_per_node));
  if (const std::string* text = Find(flags, "memory-fraction")) {
    double fraction = 0;
    if (!absl::SimpleAtod(*text, &fraction)) {
      return BadValue("memory-fraction", *text, "is not a number");
    }
    if (!(fraction > 0 && fraction <= 1)) {
      return BadValue("memory-fraction", *text, "must be in (0, 1], e.g. 0.8");
    }
    cluster.usable_memory_fraction = fraction;
  }
  return CostModel::CreateDefault(*model, cluster);
}

// The --workload or --lengths source.
absl::StatusOr<std::unique_ptr<LengthSource>> LoadSource(
    const FlagValues& flags) {
  const std::string* workload = Find(flags, "workload");
  const std::string* lengths = Find(flags, "lengths");
  if (workload != nullptr && lengths != nullptr) {
    return absl::InvalidArgumentError(
        "--workload and --lengths are exclusive; give one");
  }
  if (lengths != nullptr) {
    absl::StatusOr<std::vector<int64_t>> list = ReadLengthsFile(*lengths);
    if (!list.ok()) return list.status();
    return MakeListSource(*std::move(list));
  }
  absl::StatusOr<std::unique_ptr<LengthSource>> source =
      ParseWorkloadSpec(workload == nullptr ? "longtail" : *workload);
  if (!source.ok()) {
    return absl::Status(
        source.status().code(),
        absl::StrCat("--workload: ", source.status().message()));
  }
  return source;
}

absl::StatusOr<BatchStream> LoadStream(const FlagValues& flags, int num_gpus) {
  absl::StatusOr<std::unique_ptr<LengthSource>> source = LoadSource(flags);
  if (!source.ok()) return source.status();
  const bool has_tokens = Find(flags, "global-batch-tokens") != nullptr;
  const bool has_samples = Find(flags, "global-batch-samples") != nullptr;
  if (has_tokens && has_samples) {
    return absl::InvalidArgumentError(
        "--global-batch-tokens and --global-batch-samples are exclusive; "
        "give one");
  }
  BatchOptions options;
  if (has_samples) {
    absl::StatusOr<int64_t> samples =
        GetInt(flags, "global-batch-samples", 0, 1, int64_t{1} << 30,
               "sequences per global batch");
    if (!samples.ok()) return samples.status();
    options.global_batch_samples = *samples;
  } else {
    absl::StatusOr<int64_t> tokens =
        GetInt(flags, "global-batch-tokens", kDefaultTokensPerGpu * num_gpus, 1,
               int64_t{1} << 50, "tokens per global batch");
    if (!tokens.ok()) return tokens.status();
    options.global_batch_tokens = *tokens;
  }
  absl::StatusOr<int64_t> seed =
      GetInt(flags, "seed", 1, 0, std::numeric_limits<int64_t>::max(),
             "the workload seed");
  if (!seed.ok()) return seed.status();
  return BatchStream::Create(*std::move(source), options,
                             static_cast<uint64_t>(*seed));
}

// --sp-sizes (checked against the model and cluster),
// --bucket-micro-batch-sequences and --static-sp.
absl::Status LoadStrategyOptions(const FlagValues& flags,
                                 const CostModel& cost_model,
                                 StaticOptions& static_options,
                                 PlannerOptions& planner_options) {
  absl::StatusOr<std::vector<int>> sp_sizes = GetIntList(flags, "sp-sizes");
  if (!sp_sizes.ok()) return sp_sizes.status();
  absl::StatusOr<std::vector<int>> legal = LegalSpSizes(cost_model, *sp_sizes);
  if (!legal.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sp-sizes: ", legal.status().message()));
  }
  planner_options.sp_sizes = *sp_sizes;
  absl::StatusOr<int64_t> sequences =
      GetInt(flags, "bucket-micro-batch-sequences", 1, 1, 1 << 20,
             "sequences per bucket micro-batch");
  if (!sequences.ok()) return sequences.status();
  static_options.micro_batch_sequences = static_cast<int>(*sequences);
  absl::StatusOr<int64_t> static_sp =
      GetInt(flags, "static-sp", 0, 0, 1 << 20, "static SP size");
  if (!static_sp.ok()) return static_sp.status();
  if (*static_sp != 0) {
    absl::StatusOr<std::vector<int>> legal =
        LegalSpSizes(cost_model, {static_cast<int>(*static_sp)});
    if (!legal.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--static-sp: ", legal.status().message()));
    }
  }
  static_options.sp_size = static_cast<int>(*static_sp);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Subcommands.

// Writes results and errors of one subcommand run.
class Command {
 public:
  Command(const Subcommand& subcommand, std::ostream& out, std::ostream& err)
      : subcommand_(subcommand), out_(out), err_(err) {}

  std::ostream& out() { return out_; }
  std::ostream& err() { return err_; }

  /// A wrong command line: one line on stderr, exit 2.
  int UsageError(absl::string_view message) {
    err_ << "dcp " << subcommand_.name << ": " << OneLine(message)
         << " (run `dcp " << subcommand_.name << " --help` for usage)\n";
    return kCliUsageError;
  }
  /// The work failed: one line on stderr, exit 1.
  int Failure(absl::string_view message) {
    err_ << "dcp " << subcommand_.name << ": " << OneLine(message) << "\n";
    return kCliFailure;
  }

 private:
  static std::string OneLine(absl::string_view message) {
    std::string line(message);
    std::replace(line.begin(), line.end(), '\n', ' ');
    return line;
  }

  const Subcommand& subcommand_;
  std::ostream& out_;
  std::ostream& err_;
};

int RunSimulate(const FlagValues& flags, Command& command) {
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
  absl::StatusOr<int64_t> steps =
      GetInt(flags, "steps", 20, 1, 1'000'000, "global batches to simulate");
  if (!steps.ok()) return command.UsageError(steps.status().message());
  options.steps = static_cast<int>(*steps);
  absl::StatusOr<std::vector<std::string>> strategies =
      GetList(flags, "strategies", SimulationStrategyNames());
  if (!strategies.ok())
    return command.UsageError(strategies.status().message());
  const std::vector<std::string> known = SimulationStrategyNames();
  for (const std::string& name : *strategies) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return command.UsageError(
          absl::StrCat("--strategies: unknown strategy '", name,
                       "'; valid strategies: ", absl::StrJoin(known, ", ")));
    }
  }
  options.strategies = *strategies;
  absl::StatusOr<std::string> format =
      GetChoice(flags, "format", "table", {"table", "json"});
  if (!format.ok()) return command.UsageError(format.status().message());

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
  return kCliOk;
}

std::string DescribeRanks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "-";
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i) {
    if (ranks[i] != ranks[0] + static_cast<int>(i)) contiguous = false;
  }
  if (ranks.size() == 1) return absl::StrCat(ranks[0]);
  if (contiguous) return absl::StrCat(ranks[0], "-", ranks.back());
  return absl::StrJoin(ranks, ",");
}

std::string PlanToTable(const Plan& plan,
                        absl::Span<const int64_t> lengths_tokens,
                        const CostModel& cost_model) {
  int64_t total_tokens = 0;
  for (int64_t length : lengths_tokens) total_tokens += length;
  std::string table = absl::StrFormat(
      "strategy %s: %d sequences, %d tokens on %d GPUs\n"
      "predicted step %.3f s (slowest group %.3f s + exposed all-reduce "
      "%.3f s); lower bound %.3f s (gap %.1f%%); peak memory %.1f%% of "
      "%.1f GiB\n",
      plan.strategy, lengths_tokens.size(), total_tokens,
      cost_model.cluster().NumGpus(), plan.predicted_step_seconds,
      plan.slowest_group_seconds, plan.exposed_allreduce_seconds,
      plan.lower_bound_seconds, 100 * plan.GapToLowerBound(),
      100 * MaxPeakBytes(plan) / cost_model.MemoryBudgetBytes(),
      cost_model.MemoryBudgetBytes() / kGiB);
  std::vector<std::vector<std::string>> rows = {
      {"group", "ranks", "SP", "seconds",
       "micro-batches: tokens(checkpointed layers)"}};
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const GroupPlan& group = plan.groups[g];
    std::vector<std::string> micro_batches;
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      int64_t tokens = 0;
      for (int index : micro_batch.sequence_indices) {
        if (index >= 0 && static_cast<size_t>(index) < lengths_tokens.size()) {
          tokens += lengths_tokens[index];
        }
      }
      micro_batches.push_back(
          absl::StrCat(tokens, "(", micro_batch.checkpointed_layers, ")"));
    }
    rows.push_back(
        {absl::StrCat(g), DescribeRanks(group.ranks),
         absl::StrCat(group.sp_size()),
         absl::StrFormat("%.3f", group.predicted_seconds),
         micro_batches.empty() ? "idle" : absl::StrJoin(micro_batches, " ")});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c + 1 < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) {
        line += std::string(widths[c] - row[c].size() + 2, ' ');
      }
    }
    absl::StrAppend(&table, line, "\n");
  }
  return table;
}

int RunPlan(const FlagValues& flags, Command& command) {
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
      GetChoice(flags, "strategy", "dcp", SimulationStrategyNames());
  if (!strategy.ok()) return command.UsageError(strategy.status().message());
  absl::StatusOr<std::string> format =
      GetChoice(flags, "format", "json", {"json", "table", "svg"});
  if (!format.ok()) return command.UsageError(format.status().message());
  absl::StatusOr<int64_t> step =
      GetInt(flags, "step", 0, 0, 1'000'000, "the batch of the stream to plan");
  if (!step.ok()) return command.UsageError(step.status().message());

  std::vector<int64_t> lengths_tokens;
  if (const std::string* lengths = Find(flags, "lengths")) {
    for (const char* stream_flag :
         {"workload", "step", "seed", "global-batch-tokens",
          "global-batch-samples"}) {
      if (Find(flags, stream_flag) != nullptr) {
        return command.UsageError(absl::StrCat(
            "--", stream_flag,
            " applies to a workload stream; with --lengths=FILE the file is "
            "the batch"));
      }
    }
    absl::StatusOr<std::vector<int64_t>> list = ReadLengthsFile(*lengths);
    if (!list.ok()) return command.UsageError(list.status().message());
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

  absl::StatusOr<Plan> plan = PlanWithStrategy(
      *cost_model, *strategy, lengths_tokens, static_options, planner_options);
  if (!plan.ok()) return command.Failure(plan.status().message());
  PredictPlan(*cost_model, lengths_tokens, *plan);
  absl::StatusOr<std::vector<int>> sp_sizes =
      LegalSpSizes(*cost_model, planner_options.sp_sizes);
  if (!sp_sizes.ok()) return command.Failure(sp_sizes.status().message());
  absl::StatusOr<double> lower_bound =
      StepTimeLowerBound(*cost_model, *sp_sizes, lengths_tokens);
  if (!lower_bound.ok()) return command.Failure(lower_bound.status().message());
  plan->lower_bound_seconds = *lower_bound;

  if (const std::string* path = Find(flags, "write-lengths")) {
    std::ofstream file(*path);
    for (int64_t length : lengths_tokens) file << length << "\n";
    file.close();
    if (!file) {
      return command.Failure(
          absl::StrCat("--write-lengths=", *path, ": cannot write the file"));
    }
  }
  if (*format == "json") {
    command.out() << PlanToJson(*plan, lengths_tokens, *cost_model) << "\n";
  } else if (*format == "svg") {
    absl::StatusOr<Timeline> timeline =
        BuildTimeline(*cost_model, lengths_tokens, *plan);
    if (!timeline.ok()) return command.Failure(timeline.status().message());
    command.out() << RenderTimelineSvg(*timeline);
  } else {
    command.out() << PlanToTable(*plan, lengths_tokens, *cost_model);
  }
  return kCliOk;
}

int RunValidate(const FlagValues& flags, Command& command) {
  for (const char* required : {"plan", "lengths"}) {
    if (Find(flags, required) == nullptr) {
      return command.UsageError(
          absl::StrCat("--", required, "=FILE is required"));
    }
  }
  absl::StatusOr<CostModel> cost_model = LoadCostModel(flags);
  if (!cost_model.ok())
    return command.UsageError(cost_model.status().message());
  absl::StatusOr<std::vector<int64_t>> lengths_tokens =
      ReadLengthsFile(*Find(flags, "lengths"));
  if (!lengths_tokens.ok()) {
    return command.UsageError(lengths_tokens.status().message());
  }
  const std::string& plan_path = *Find(flags, "plan");
  absl::StatusOr<std::string> plan_text = ReadFile("plan", plan_path);
  if (!plan_text.ok()) return command.UsageError(plan_text.status().message());

  absl::StatusOr<Plan> plan = PlanFromJson(*plan_text);
  if (!plan.ok()) {
    command.out() << "plan is invalid: " << plan_path << ": "
                  << plan.status().message() << "\n";
    return kCliFailure;
  }
  if (absl::Status status = ValidatePlan(*cost_model, *lengths_tokens, *plan);
      !status.ok()) {
    command.out() << "plan is invalid: "
                  << absl::StripPrefix(status.message(), "invalid plan: ")
                  << "\n";
    return kCliFailure;
  }
  // Valid, so the indices are safe to predict from.
  Plan predicted = *plan;
  PredictPlan(*cost_model, *lengths_tokens, predicted);
  int micro_batches = 0;
  for (const GroupPlan& group : predicted.groups) {
    micro_batches += static_cast<int>(group.micro_batches.size());
  }
  command.out() << absl::StrFormat(
      "plan is valid: %d SP group(s) over %d GPUs, %d sequence(s) in %d "
      "micro-batch(es), max memory %.1f%% of the %.1f GiB budget, predicted "
      "step %.3f s\n",
      predicted.groups.size(), cost_model->cluster().NumGpus(),
      lengths_tokens->size(), micro_batches,
      100 * MaxPeakBytes(predicted) / cost_model->MemoryBudgetBytes(),
      cost_model->MemoryBudgetBytes() / kGiB, predicted.predicted_step_seconds);
  return kCliOk;
}

}  // namespace

int RunDcpCli(int argc, char** argv, std::ostream& out, std::ostream& err) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  if (args.empty()) {
    err << MainUsage();
    return kCliUsageError;
  }
  if (IsHelp(args[0]) || args[0] == "help") {
    const Subcommand* subcommand =
        args.size() > 1 ? FindSubcommand(args[1]) : nullptr;
    out << (subcommand != nullptr ? SubcommandUsage(*subcommand) : MainUsage());
    return kCliOk;
  }
  const Subcommand* subcommand = FindSubcommand(args[0]);
  if (subcommand == nullptr) {
    std::vector<std::string> names;
    for (const Subcommand& known : Subcommands()) names.push_back(known.name);
    err << "dcp: "
        << (args[0].compare(0, 1, "-") == 0
                ? absl::StrCat("expected a subcommand before '", args[0], "'")
                : absl::StrCat("unknown subcommand '", args[0], "'"))
        << "; subcommands: " << absl::StrJoin(names, ", ")
        << " (run `dcp --help` or `dcp SUBCOMMAND --help`)\n";
    return kCliUsageError;
  }
  args.erase(args.begin());
  if (std::any_of(args.begin(), args.end(),
                  [](const std::string& arg) { return IsHelp(arg); })) {
    out << SubcommandUsage(*subcommand);
    return kCliOk;
  }
  Command command(*subcommand, out, err);
  absl::StatusOr<FlagValues> flags = ParseFlags(*subcommand, args);
  if (!flags.ok()) return command.UsageError(flags.status().message());
  if (subcommand->name == "simulate") return RunSimulate(*flags, command);
  if (subcommand->name == "plan") return RunPlan(*flags, command);
  return RunValidate(*flags, command);
}

}  // namespace dcp
