// exact_gap: dcp's optimality gap on small instances, against the exact
// reference (the exhaustive search of planner/exact/exact_reference.h up to 12
// sequences, the MILP of planner/exact/milp_reference.h beyond), next to its gap
// to the lower bound. Prints one row per instance family and a line of
// progress per batch on stderr; every figure is a cost-model prediction.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/command_line.h"
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
  absl::StatusOr<int64_t> instances = flags->Int("instances", 1, 10000);
  absl::StatusOr<int64_t> milp_instances =
      flags->Int("milp_instances", 1, 10000);
  absl::StatusOr<int64_t> only_gpus = flags->Int("gpus", 0, 1 << 20);
  if (!only_gpus.ok()) {
    std::cerr << "exact_gap: " << only_gpus.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<bool> milp_closes = flags->Bool("milp_closes");
  if (!milp_closes.ok()) {
    std::cerr << "exact_gap: " << milp_closes.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<int64_t> seed = flags->Int("seed", 0, 1'000'000'000);
  absl::StatusOr<double> layout_seconds =
      flags->Double("layout_seconds", 0, 3600, /*min_exclusive=*/true);
  absl::StatusOr<double> batch_seconds =
      flags->Double("batch_seconds", 0, 86400, /*min_exclusive=*/true);
  const std::string which = flags->String("families");
  if (!milp_instances.ok()) {
    std::cerr << "exact_gap: " << milp_instances.status().message() << "\n";
    return 2;
  }
  if (!instances.ok() || !seed.ok() || !layout_seconds.ok() ||
      !batch_seconds.ok()) {
    std::cerr << "exact_gap: "
              << (!instances.ok()        ? instances.status()
                  : !seed.ok()           ? seed.status()
                  : !layout_seconds.ok() ? layout_seconds.status()
                                         : batch_seconds.status())
                     .message()
              << "\n";
    return 2;
  }
  if (which != "all" && which != "exhaustive" && which != "milp") {
    std::cerr << "exact_gap: --families=" << which
              << ": must be all, exhaustive or milp\n";
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  std::cout << absl::StrFormat(
      "%-13s %-21s %5s %4s %5s | %-22s | %-22s | %-13s\n", "model", "workload",
      "GPUs", "seqs", "exact", "dcp gap to optimum", "dcp gap to lower bound",
      "optimum vs LB");
  std::cout << absl::StrFormat("%-52s | %-22s | %-22s | %-13s\n", "",
                               "mean / max", "mean / max", "mean");
  for (const Family& family : kFamilies) {
    if ((which == "exhaustive" && family.milp) ||
        (which == "milp" && !family.milp) ||
        (*only_gpus != 0 &&
         *only_gpus != family.nodes * family.gpus_per_node)) {
      continue;
    }
    absl::StatusOr<CostModel> cost_model = CostModel::CreateDefault(
        *ModelPreset(family.model),
        H200Cluster(family.nodes, family.gpus_per_node));
    absl::StatusOr<std::unique_ptr<LengthSource>> source =
        ParseWorkloadSpec(family.workload);
    if (!cost_model.ok() || !source.ok()) {
      std::cerr << "exact_gap: "
                << (!cost_model.ok() ? cost_model.status() : source.status())
                << "\n";
      return 1;
    }
    PlannerOptions options;
    options.static_options.workload_max_length_tokens =
        (*source)->MaxLengthTokens();
    BatchOptions batch_options;
    batch_options.global_batch_samples = family.sequences;
    absl::StatusOr<BatchStream> stream = BatchStream::Create(
        *std::move(source), batch_options, static_cast<uint64_t>(*seed));
    const std::vector<int> sizes = *LegalSpSizes(*cost_model, {});
    double sum_gap = 0, max_gap = 0, sum_lb_gap = 0, max_lb_gap = 0;
    double sum_optimum_vs_lb = 0;
    double max_gap_upper_end = 0;
    int exact_count = 0;
    const int batches =
        static_cast<int>(family.milp ? *milp_instances : *instances);
    for (int i = 0; i < batches; ++i) {
      std::vector<int64_t> lengths;
      for (const Sample& sample : stream->Next()) {
        lengths.push_back(sample.length_tokens);
      }
      absl::StatusOr<Plan> plan =
          Planner(*cost_model, options).PlanBatch(lengths);
      absl::StatusOr<double> bound =
          StepTimeLowerBound(*cost_model, sizes, lengths);
      if (!plan.ok() || !bound.ok()) {
        std::cerr << "exact_gap: "
                  << (!plan.ok() ? plan.status() : bound.status()) << "\n";
        return 1;
      }
      const double dcp = plan->predicted_step_seconds;
      Bracket bracket;
      if (family.milp) {
        MilpReferenceOptions milp_options;
        milp_options.layout_time_limit_seconds = *layout_seconds;
        milp_options.time_limit_seconds = *batch_seconds;
        milp_options.upper_bound_seconds = dcp;
        absl::StatusOr<MilpReference> milp =
            ComputeMilpReference(*cost_model, {}, lengths, milp_options);
        if (!milp.ok()) {
          std::cerr << "exact_gap: " << milp.status() << "\n";
          return 1;
        }
        bracket = {milp->upper_seconds, milp->lower_seconds, milp->proven};
        std::cerr << absl::StrFormat(
            "exact_gap: %s %s %d GPUs batch %d: dcp %.4f s, optimum in "
            "[%.4f, %.4f] s (%d/%d layouts closed, largest MILP %d "
            "columns), %.0f s elapsed\n",
            family.model, family.workload, family.nodes * family.gpus_per_node,
            i + 1, dcp, bracket.lower, bracket.upper, milp->layouts_proven,
            milp->layouts, milp->max_columns, elapsed());
      } else {
        absl::StatusOr<ExactReference> exact =
            ComputeExactReference(*cost_model, {}, lengths);
        if (!exact.ok()) {
          std::cerr << "exact_gap: " << exact.status() << "\n";
          return 1;
        }
        bracket = {exact->upper_seconds, exact->lower_seconds,
                   exact->upper_seconds <= exact->lower_seconds * (1 + 1e-9)};
        if (!bracket.pinned && *milp_closes) {
          // Where the search's ends do not meet, the MILP may close them.
          MilpReferenceOptions milp_options;
          milp_options.layout_time_limit_seconds = *layout_seconds;
          milp_options.time_limit_seconds = *batch_seconds;
          milp_options.upper_bound_seconds = std::min(dcp, bracket.upper);
          absl::StatusOr<MilpReference> milp =
              ComputeMilpReference(*cost_model, {}, lengths, milp_options);
          if (!milp.ok()) {
            std::cerr << "exact_gap: " << milp.status() << "\n";
            return 1;
          }
          bracket.upper = std::min(bracket.upper, milp->upper_seconds);
          bracket.lower = std::max(bracket.lower, milp->lower_seconds);
          bracket.pinned = milp->proven;
        }
      }
      // The optimum lies in [max(lower, bound), min(upper, dcp)]; dcp's gap
      // to it is at least dcp / min(upper, dcp) - 1 and at most
      // dcp / max(lower, bound) - 1.
      const double optimum = std::min(bracket.upper, dcp);
      const double gap = dcp / optimum - 1;
      const double gap_upper_end = dcp / std::max(bracket.lower, *bound) - 1;
      if (bracket.pinned) ++exact_count;
      sum_gap += gap;
      max_gap = std::max(max_gap, gap);
      max_gap_upper_end = std::max(max_gap_upper_end, gap_upper_end);
      sum_lb_gap += dcp / *bound - 1;
      max_lb_gap = std::max(max_lb_gap, dcp / *bound - 1);
      sum_optimum_vs_lb += optimum / *bound - 1;
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
