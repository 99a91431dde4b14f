// exact_gap: dcp's optimality gap on small instances, against the exact
// reference (planner/exact_reference.h), next to its gap to the lower bound.
// Prints one row per instance family; every figure is a cost-model
// prediction.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/command_line.h"
#include "cost_model/cost_model.h"
#include "planner/batch_check.h"
#include "planner/exact_reference.h"
#include "planner/lower_bound.h"
#include "planner/planner.h"
#include "planner/workload.h"

namespace dcp {
namespace {

constexpr FlagSpec kFlags[] = {
    {"instances", "N", "10", "batches per instance family"},
    {"seed", "S", "1", "seed of the workloads"},
};

struct Family {
  const char* model;
  const char* workload;
  int nodes;
  int gpus_per_node;
  int sequences;
};

constexpr Family kFamilies[] = {
    {"llama3-8b", "longtail", 1, 8, 12},
    {"llama3-8b", "uniform", 1, 8, 12},
    {"video-dit-1b", "video", 1, 8, 12},
    {"llama3-8b", "longtail:median=4096", 2, 8, 10},
    {"llama3-8b", "uniform", 2, 8, 10},
    {"video-dit-1b", "video", 2, 8, 10},
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
                       "H200s, 10-12 sequences) against the exhaustive "
                       "optimum under the cost model, next to its gap to "
                       "the lower bound.",
                       kFlags, "");
    return 0;
  }
  absl::StatusOr<int64_t> instances = flags->Int("instances", 1, 10000);
  absl::StatusOr<int64_t> seed = flags->Int("seed", 0, 1'000'000'000);
  if (!instances.ok() || !seed.ok()) {
    std::cerr
        << "exact_gap: "
        << (!instances.ok() ? instances.status() : seed.status()).message()
        << "\n";
    return 2;
  }
  std::cout << absl::StrFormat(
      "%-13s %-21s %5s %4s %5s | %-22s | %-22s | %-13s\n", "model", "workload",
      "GPUs", "seqs", "exact", "dcp gap to optimum", "dcp gap to lower bound",
      "optimum vs LB");
  std::cout << absl::StrFormat("%-52s | %-22s | %-22s | %-13s\n", "",
                               "mean / max", "mean / max", "mean");
  for (const Family& family : kFamilies) {
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
    for (int i = 0; i < *instances; ++i) {
      std::vector<int64_t> lengths;
      for (const Sample& sample : stream->Next()) {
        lengths.push_back(sample.length_tokens);
      }
      absl::StatusOr<Plan> plan =
          Planner(*cost_model, options).PlanBatch(lengths);
      absl::StatusOr<ExactReference> exact =
          ComputeExactReference(*cost_model, {}, lengths);
      absl::StatusOr<double> bound =
          StepTimeLowerBound(*cost_model, sizes, lengths);
      if (!plan.ok() || !exact.ok() || !bound.ok()) {
        std::cerr << "exact_gap: "
                  << (!plan.ok()    ? plan.status()
                      : !exact.ok() ? exact.status()
                                    : bound.status())
                  << "\n";
        return 1;
      }
      const double dcp = plan->predicted_step_seconds;
      // The optimum lies in [max(lower, bound), min(upper, dcp)]; dcp's gap
      // to it is at least dcp / min(upper, dcp) - 1 and at most
      // dcp / max(lower, bound) - 1.
      const double gap = dcp / std::min(exact->upper_seconds, dcp) - 1;
      const double gap_upper_end =
          dcp / std::max(exact->lower_seconds, *bound) - 1;
      if (exact->upper_seconds <= exact->lower_seconds * (1 + 1e-9)) {
        ++exact_count;
      }
      sum_gap += gap;
      max_gap = std::max(max_gap, gap);
      max_gap_upper_end = std::max(max_gap_upper_end, gap_upper_end);
      sum_lb_gap += dcp / *bound - 1;
      max_lb_gap = std::max(max_lb_gap, dcp / *bound - 1);
      sum_optimum_vs_lb += exact->upper_seconds / *bound - 1;
    }
    const double n = static_cast<double>(*instances);
    std::cout << absl::StrFormat(
        "%-13s %-21s %5d %4d %2d/%-2d | %+6.2f%% / %+6.2f%%%s | %6.2f%% / "
        "%6.2f%%     | %6.2f%%\n",
        family.model, family.workload, family.nodes * family.gpus_per_node,
        family.sequences, exact_count, *instances, 100 * sum_gap / n,
        100 * max_gap,
        exact_count == *instances
            ? std::string(4, ' ')
            : absl::StrFormat(" (<=%.1f%%)", 100 * max_gap_upper_end),
        100 * sum_lb_gap / n, 100 * max_lb_gap, 100 * sum_optimum_vs_lb / n);
  }
  std::cout << "exact: batches whose optimum the search pins (its two ends "
               "meet). dcp gap to optimum: dcp against the best plan the "
               "exhaustive search found (the true gap is at least this); in "
               "brackets, where not every batch is pinned, the most it can "
               "be (dcp against the search's lower end or the lower bound). "
               "optimum vs LB: that best plan against the lower bound.\n";
  return 0;
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) { return dcp::Run(argc, argv); }
