// exact_gap: dcp's optimality gap on small instances, against the exact
// reference (the exhaustive search of planner/exact/exact_reference.h up to 12
// sequences, the MILP of planner/exact/milp_reference.h beyond), next to its gap
// to the lower bound. Prints one row per instance family and a line of
// progress per batch on stderr; every figure is a cost-model prediction.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/command_line.h"
#include "common/status_macros.h"
#include "cost_model/cost_model.h"
#include "planner/plan/batch_check.h"
#include "planner/exact/exact_reference.h"
#include "planner/search/lower_bound.h"
#include "planner/exact/milp_reference.h"
#include "planner/search/planner.h"
#include "planner/workload/workload.h"

namespace dcp {
namespace {

constexpr FlagSpec kFlags[] = {
    {"instances", "N", "10", "batches per exhaustive-search row"},
    {"milp_instances", "N", "3", "batches per MILP row"},
    {"seed", "S", "1", "seed of the workloads"},
    {"families", "LIST", "all",
     "which rows: all, exhaustive (the 10-12 sequence rows) or milp (the "
     "16-64 sequence rows)"},
    {"gpus", "N", "0", "only the rows of this many GPUs (8 or 16); 0: all"},
    {"layout_seconds", "S", "5",
     "CBC's limit per layout MILP, in CPU seconds of this process (so a "
     "loaded machine does not change what it finds); a layout it does not "
     "close counts with its best bound"},
    {"batch_seconds", "S", "900", "wall-clock limit per batch (MILP)"},
    {"milp_closes", "BOOL", "true",
     "on the exhaustive rows, run the MILP where the search's two ends do "
     "not meet"},
};

struct Family {
  const char* model;
  const char* workload;
  int nodes;
  int gpus_per_node;
  int sequences;
  bool milp;  // the MILP reference, else the exhaustive search
};

constexpr Family kFamilies[] = {
    {"llama3-8b", "longtail", 1, 8, 12, false},
    {"llama3-8b", "uniform", 1, 8, 12, false},
    {"video-dit-1b", "video", 1, 8, 12, false},
    {"llama3-8b", "longtail:median=4096", 2, 8, 10, false},
    {"llama3-8b", "uniform", 2, 8, 10, false},
    {"video-dit-1b", "video", 2, 8, 10, false},
    {"llama3-8b", "longtail", 1, 8, 32, true},
    {"llama3-8b", "uniform", 1, 8, 16, true},
    {"video-dit-1b", "video", 1, 8, 64, true},
    {"llama3-8b", "longtail:median=4096", 2, 8, 32, true},
    {"llama3-8b", "uniform", 2, 8, 24, true},
    {"video-dit-1b", "video", 2, 8, 32, true},
};

// The optimum's bracket of one batch from either reference.
struct Bracket {
  double upper = 0;
  double lower = 0;
  bool pinned = false;
};

// The flags, checked.
struct GapConfig {
  int64_t instances = 0;
  int64_t milp_instances = 0;
  int64_t only_gpus = 0;
  bool milp_closes = false;
  int64_t seed = 0;
  double layout_seconds = 0;
  double batch_seconds = 0;
  std::string families;
};

absl::StatusOr<GapConfig> ConfigOf(const ParsedFlags& flags) {
  GapConfig config;
  DCP_ASSIGN_OR_RETURN(config.only_gpus, flags.Int("gpus", 0, 1 << 20));
  DCP_ASSIGN_OR_RETURN(config.milp_closes, flags.Bool("milp_closes"));
  DCP_ASSIGN_OR_RETURN(config.milp_instances,
                       flags.Int("milp_instances", 1, 10000));
  DCP_ASSIGN_OR_RETURN(config.instances, flags.Int("instances", 1, 10000));
  DCP_ASSIGN_OR_RETURN(config.seed, flags.Int("seed", 0, 1'000'000'000));
  DCP_ASSIGN_OR_RETURN(
      config.layout_seconds,
      flags.Double("layout_seconds", 0, 3600, /*min_exclusive=*/true));
  DCP_ASSIGN_OR_RETURN(
      config.batch_seconds,
      flags.Double("batch_seconds", 0, 86400, /*min_exclusive=*/true));
  config.families = flags.String("families");
  if (config.families != "all" && config.families != "exhaustive" &&
      config.families != "milp") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--families=", config.families, ": must be all, exhaustive or milp"));
  }
  return config;
}

// Seconds since the run started.
class Elapsed {
 public:
  double operator()() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_ =
      std::chrono::steady_clock::now();
};

// The optimum's bracket of one batch whose dcp plan takes `dcp` seconds:
// one MILP per layout (MILP families), or the exhaustive search, closed by
// the MILP where its ends do not meet (--milp_closes).
absl::StatusOr<Bracket> BracketOf(const Family& family,
                                  const CostModel& cost_model,
                                  const std::vector<int64_t>& lengths,
                                  double dcp, const GapConfig& config,
                                  int batch, const Elapsed& elapsed) {
  MilpReferenceOptions milp_options;
  milp_options.layout_time_limit_seconds = config.layout_seconds;
  milp_options.time_limit_seconds = config.batch_seconds;
  if (family.milp) {
    milp_options.upper_bound_seconds = dcp;
    DCP_ASSIGN_OR_RETURN(
        const MilpReference milp,
        ComputeMilpReference(cost_model, {}, lengths, milp_options));
    const Bracket bracket = {milp.upper_seconds, milp.lower_seconds,
                             milp.proven};
    std::cerr << absl::StrFormat(
        "exact_gap: %s %s %d GPUs batch %d: dcp %.4f s, optimum in "
        "[%.4f, %.4f] s (%d/%d layouts closed, largest MILP %d "
        "columns), %.0f s elapsed\n",
        family.model, family.workload, family.nodes * family.gpus_per_node,
        batch + 1, dcp, bracket.lower, bracket.upper, milp.layouts_proven,
        milp.layouts, milp.max_columns, elapsed());
    return bracket;
  }
  DCP_ASSIGN_OR_RETURN(const ExactReference exact,
                       ComputeExactReference(cost_model, {}, lengths));
  Bracket bracket = {exact.upper_seconds, exact.lower_seconds,
                     exact.upper_seconds <= exact.lower_seconds * (1 + 1e-9)};
  if (!bracket.pinned && config.milp_closes) {
    // Where the search's ends do not meet, the MILP may close them.
    milp_options.upper_bound_seconds = std::min(dcp, bracket.upper);
    DCP_ASSIGN_OR_RETURN(
        const MilpReference milp,
        ComputeMilpReference(cost_model, {}, lengths, milp_options));
    bracket.upper = std::min(bracket.upper, milp.upper_seconds);
    bracket.lower = std::max(bracket.lower, milp.lower_seconds);
    bracket.pinned = milp.proven;
  }
  return bracket;
}

// One family's row: dcp's gaps to the optimum and to the lower bound over
// its batches.
absl::Status RunFamily(const Family& family, const GapConfig& config,
                       const Elapsed& elapsed) {
  DCP_ASSIGN_OR_RETURN(
      const CostModel cost_model,
      CostModel::CreateDefault(*ModelPreset(family.model),
                               H200Cluster(family.nodes, family.gpus_per_node)));
  DCP_ASSIGN_OR_RETURN(std::unique_ptr<LengthSource> source,
                       ParseWorkloadSpec(family.workload));
  PlannerOptions options;
  options.static_options.workload_max_length_tokens =
      source->MaxLengthTokens();
  BatchOptions batch_options;
  batch_options.global_batch_samples = family.sequences;
  DCP_ASSIGN_OR_RETURN(
      BatchStream stream,
      BatchStream::Create(std::move(source), batch_options,
                          static_cast<uint64_t>(config.seed)));
  const std::vector<int> sizes = *LegalSpSizes(cost_model, {});
  double sum_gap = 0, max_gap = 0, sum_lb_gap = 0, max_lb_gap = 0;
  double sum_optimum_vs_lb = 0;
  double max_gap_upper_end = 0;
  int exact_count = 0;
  const int batches =
      static_cast<int>(family.milp ? config.milp_instances : config.instances);
  for (int i = 0; i < batches; ++i) {
    std::vector<int64_t> lengths;
    for (const Sample& sample : stream.Next()) {
      lengths.push_back(sample.length_tokens);
    }
    DCP_ASSIGN_OR_RETURN(const Plan plan,
                         Planner(cost_model, options).PlanBatch(lengths));
    DCP_ASSIGN_OR_RETURN(const double bound,
                         StepTimeLowerBound(cost_model, sizes, lengths));
    const double dcp = plan.predicted_step_seconds;
    DCP_ASSIGN_OR_RETURN(
        const Bracket bracket,
        BracketOf(family, cost_model, lengths, dcp, config, i, elapsed));
    // The optimum lies in [max(lower, bound), min(upper, dcp)]; dcp's gap
    // to it is at least dcp / min(upper, dcp) - 1 and at most
    // dcp / max(lower, bound) - 1.
    const double optimum = std::min(bracket.upper, dcp);
    const double gap = dcp / optimum - 1;
    const double gap_upper_end = dcp / std::max(bracket.lower, bound) - 1;
    if (bracket.pinned) ++exact_count;
    sum_gap += gap;
    max_gap = std::max(max_gap, gap);
    max_gap_upper_end = std::max(max_gap_upper_end, gap_upper_end);
    sum_lb_gap += dcp / bound - 1;
    max_lb_gap = std::max(max_lb_gap, dcp / bound - 1);
    sum_optimum_vs_lb += optimum / bound - 1;
  }
  const double n = static_cast<double>(batches);
  std::cout << absl::StrFormat(
      "%-13s %-21s %5d %4d %2d/%-2d | %+6.2f%% / %+6.2f%%%s | %6.2f%% / "
      "%6.2f%%     | %6.2f%%\n",
      family.model, family.workload, family.nodes * family.gpus_per_node,
      family.sequences, exact_count, batches, 100 * sum_gap / n,
      100 * max_gap,
      exact_count == batches
          ? std::string(4, ' ')
          : absl::StrFormat(" (<=%.1f%%)", 100 * max_gap_upper_end),
      100 * sum_lb_gap / n, 100 * max_lb_gap, 100 * sum_optimum_vs_lb / n);
  return absl::OkStatus();
}

int Run(int argc, char** argv) {
  absl::StatusOr<ParsedFlags> flags = ParseFlags(argc, argv, kFlags);
  if (!flags.ok()) {
    std::cerr << "exact_gap: " << flags.status().message() << "\n";
    return 2;
  }
  if (flags->help()) {
    std::cout << Usage("exact_gap",
                       "dcp's optimality gap on small batches (8 and 16 "
                       "H200s) against the optimum under the cost model "
                       "(exhaustive search for 10-12 sequences, one CBC "
                       "MILP per layout for 16-64, dcp's step as the "
                       "cutoff), next to its gap to the lower bound. "
                       "Progress per MILP batch on stderr.",
                       kFlags, "");
    return 0;
  }
  absl::StatusOr<GapConfig> config = ConfigOf(*flags);
  if (!config.ok()) {
    std::cerr << "exact_gap: " << config.status().message() << "\n";
    return 2;
  }
  const Elapsed elapsed;
  std::cout << absl::StrFormat(
      "%-13s %-21s %5s %4s %5s | %-22s | %-22s | %-13s\n", "model", "workload",
      "GPUs", "seqs", "exact", "dcp gap to optimum", "dcp gap to lower bound",
      "optimum vs LB");
  std::cout << absl::StrFormat("%-52s | %-22s | %-22s | %-13s\n", "",
                               "mean / max", "mean / max", "mean");
  for (const Family& family : kFamilies) {
    if ((config->families == "exhaustive" && family.milp) ||
        (config->families == "milp" && !family.milp) ||
        (config->only_gpus != 0 &&
         config->only_gpus != family.nodes * family.gpus_per_node)) {
      continue;
    }
    if (absl::Status status = RunFamily(family, *config, elapsed);
        !status.ok()) {
      std::cerr << "exact_gap: " << status << "\n";
      return 1;
    }
  }
  std::cout << absl::StrFormat(
      "exact: batches whose optimum the reference pins (the exhaustive "
      "search's two ends meet, or else every layout MILP closed to 0.01%%). "
      "dcp gap "
      "to optimum: dcp against the best plan found (the true gap is at least "
      "this); in brackets, where not every batch is pinned, the most it can "
      "be (dcp against the reference's lower end or the lower bound). "
      "optimum vs LB: the best plan (or dcp's) against the lower bound. "
      "%.0f s in all.\n",
      elapsed());
  return 0;
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) { return dcp::Run(argc, argv); }
