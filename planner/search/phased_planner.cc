#include "planner/search/phased_planner.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "planner/plan/batch_check.h"
#include "planner/search/lower_bound.h"

// Why StepTimeLowerBound also bounds phased plans (with or without
// barriers): it is the larger of (a) every sequence's least GPU-seconds
// over the SP sizes it fits, summed and divided by the GPU count, and (b)
// the longest sequence's least time alone in a micro-batch, plus the
// all-reduce term. Neither term assumes one layout per step: each sequence
// is priced at its own best SP size, whichever group of whichever phase runs
// it, so (a) bounds the busiest rank's busy time in any schedule and (b)
// the group that runs the longest sequence. The step ends with the
// gradient all-reduce after the last micro-batch's backward, which is at
// most (1 - forward share) of the time before it, so the all-reduce term
// holds too. One layout per step sets no part of the bound; phases can
// close the gap to it but not lower it. phased_planner_test checks
// bound <= phased <= single-layout on small instances.

namespace dcp {
namespace {

// Plans the sequences `members` (global indices) as one phase over all
// ranks, the plan's indices global again.
absl::StatusOr<Plan> PlanPhase(const Planner& planner,
                               absl::Span<const int64_t> lengths_tokens,
                               const std::vector<int>& members) {
  std::vector<int64_t> phase_lengths;
  phase_lengths.reserve(members.size());
  for (int index : members) phase_lengths.push_back(lengths_tokens[index]);
  absl::StatusOr<Plan> plan = planner.PlanBatch(phase_lengths);
  if (!plan.ok()) return plan.status();
  for (GroupPlan& group : plan->groups) {
    for (MicroBatchPlan& micro_batch : group.micro_batches) {
      for (int& index : micro_batch.sequence_indices) index = members[index];
    }
  }
  return plan;
}

}  // namespace

absl::StatusOr<PhasedPlan> PlanPhasedBatch(
    const CostModel& cost_model, absl::Span<const int64_t> lengths_tokens,
    const PhasedPlannerOptions& options) {
  const Planner planner(cost_model, options.planner_options);
  absl::StatusOr<Plan> single = planner.PlanBatch(lengths_tokens);
  if (!single.ok()) return single.status();
  absl::StatusOr<std::vector<int>> sp_sizes =
      LegalSpSizes(cost_model, options.planner_options.sp_sizes);
  if (!sp_sizes.ok()) return sp_sizes.status();
  absl::StatusOr<double> lower_bound =
      StepTimeLowerBound(cost_model, *sp_sizes, lengths_tokens);
  if (!lower_bound.ok()) return lower_bound.status();

  PhasedPlan best;
  best.strategy = options.planner_options.strategy_name;
  best.phases.push_back(*std::move(single));
  PredictPhasedPlan(cost_model, lengths_tokens, best);

  const int n = static_cast<int>(lengths_tokens.size());
  // Longest first; ties by index, so the search is deterministic.
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return lengths_tokens[a] > lengths_tokens[b];
  });
  const int max_long = std::min(
      n - 1, std::max(1, static_cast<int>(options.max_long_share * n)));
  const int steps = std::max(1, options.short_share_steps);
  for (int k = 1; k <= max_long; k *= 2) {
    // Cut only between distinct lengths: equal lengths would rather share
    // a phase.
    if (lengths_tokens[order[k - 1]] == lengths_tokens[order[k]]) continue;
    double rest_tokens = 0;
    for (int i = k; i < n; ++i) rest_tokens += lengths_tokens[order[i]];
    // Fillers of the first phase: the longest of the rest (medium lengths
    // beside the long groups) or the shortest (fine-grained filling).
    for (const bool longest_fillers : {true, false}) {
      for (int step = 0; step < steps; ++step) {
        if (step == 0 && !longest_fillers) continue;  // the same as above
        const double filler_tokens = rest_tokens * step / steps;
        std::vector<int> first(order.begin(), order.begin() + k);
        std::vector<bool> in_first(n, false);
        for (int index : first) in_first[index] = true;
        double taken = 0;
        for (int i = 0; i < n - k; ++i) {
          const int index = order[longest_fillers ? k + i : n - 1 - i];
          if (taken + lengths_tokens[index] > filler_tokens) break;
          taken += lengths_tokens[index];
          first.push_back(index);
          in_first[index] = true;
        }
        std::vector<int> second;
        for (int index : order) {
          if (!in_first[index]) second.push_back(index);
        }
        if (second.empty()) continue;
        std::sort(first.begin(), first.end());
        std::sort(second.begin(), second.end());
        absl::StatusOr<Plan> phase1 = PlanPhase(planner, lengths_tokens, first);
        if (!phase1.ok()) return phase1.status();
        absl::StatusOr<Plan> phase2 =
            PlanPhase(planner, lengths_tokens, second);
        if (!phase2.ok()) return phase2.status();
        PhasedPlan candidate;
        candidate.strategy = best.strategy;
        candidate.phases.push_back(*std::move(phase1));
        candidate.phases.push_back(*std::move(phase2));
        PredictPhasedPlan(cost_model, lengths_tokens, candidate);
        if (candidate.predicted_step_seconds < best.predicted_step_seconds) {
          best = std::move(candidate);
        }
      }
    }
  }
  best.lower_bound_seconds = *lower_bound;
  for (Plan& phase : best.phases) phase.strategy = best.strategy;
  return best;
}

}  // namespace dcp
