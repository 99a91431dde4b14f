#include "planner/search/phased_planner.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "planner/plan/batch_check.h"
#include "planner/search/lower_bound.h"
#include "planner/search/packing.h"

// Why StepTimeLowerBound also bounds phased plans (with or without
// barriers): it is the largest of (a) every sequence's least GPU-seconds
// over the SP sizes it fits, summed and divided by the GPU count, (b) the
// longest sequence's least time alone in a micro-batch, and (c) the packing
// term, plus the all-reduce term. No term assumes one layout per step: each
// sequence is priced at its own best SP size, whichever group of whichever
// phase runs it, so (a) bounds the busiest rank's busy time in any schedule
// and (b) the group that runs the longest sequence; (c) counts each GPU's
// busy time over the whole step, all phases together, so two sequences that
// each add more than half of it still cannot share a GPU. The step ends with
// the gradient all-reduce after the last micro-batch's backward, which is at
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

// One two-phase split of the batch: the first phase holds the `k`
// longest sequences and, as fillers, the longest (or the shortest) of the
// rest while their tokens stay within `filler_tokens`; the second phase
// the others. Each phase's member list is in index order.
struct Split {
  int k = 0;
  bool longest_fillers = true;
  double filler_tokens = 0;
};

struct SplitMembers {
  std::vector<int> first;
  std::vector<int> second;
};

// `order`: the batch's indices, longest first.
SplitMembers MembersOf(const Split& split, absl::Span<const int64_t> lengths,
                       const std::vector<int>& order) {
  const int n = static_cast<int>(order.size());
  SplitMembers members;
  members.first.assign(order.begin(), order.begin() + split.k);
  std::vector<bool> in_first(n, false);
  for (int index : members.first) in_first[index] = true;
  double taken = 0;
  for (int i = 0; i < n - split.k; ++i) {
    const int index = order[split.longest_fillers ? split.k + i : n - 1 - i];
    if (taken + lengths[index] > split.filler_tokens) break;
    taken += lengths[index];
    members.first.push_back(index);
    in_first[index] = true;
  }
  for (int index = 0; index < n; ++index) {
    if (!in_first[index]) members.second.push_back(index);
  }
  std::sort(members.first.begin(), members.first.end());
  return members;
}

// The single-layout plan of the whole batch as a one-phase plan, predicted,
// with the batch's lower bound (StepTimeLowerBound, which the planner's
// batch table computed; 0 where it has none).
absl::StatusOr<PhasedPlan> PlanSingleLayout(
    const Planner& planner, absl::Span<const int64_t> lengths_tokens) {
  absl::StatusOr<Plan> single = planner.PlanBatch(lengths_tokens);
  if (!single.ok()) return single.status();
  return AsOnePhase(*std::move(single));
}

// The per-sequence bounds on the SP sizes the planner may use.
absl::StatusOr<SequenceBounds> MakeSequenceBounds(
    const CostModel& cost_model, absl::Span<const int64_t> lengths_tokens,
    const PhasedPlannerOptions& options) {
  absl::StatusOr<std::vector<int>> sp_sizes =
      LegalSpSizes(cost_model, options.planner_options.sp_sizes);
  if (!sp_sizes.ok()) return sp_sizes.status();
  return SequenceBounds::Create(cost_model, *sp_sizes, lengths_tokens);
}

// A candidate split with its phases' lower bounds: the phases run one
// after the other, so their bounds add; the step's end follows the second.
struct Candidate {
  Split split;
  double bound = 0;         // on the candidate's step time
  double second_bound = 0;  // on its second phase and the step's end
  // Its fillers just fill the first phase: their least GPU-seconds reach
  // the longest sequence's time alone on every GPU (the split whose first
  // phase neither idles nor overruns, by the bounds).
  bool balanced = false;
};

// Adds `split` to `candidates` with its bounds, unless it leaves the second
// phase empty.
void AddCandidate(const Split& split, bool balanced,
                  absl::Span<const int64_t> lengths_tokens,
                  const std::vector<int>& order, const SequenceBounds& bounds,
                  std::vector<Candidate>& candidates) {
  Candidate candidate;
  candidate.split = split;
  candidate.balanced = balanced;
  const SplitMembers members =
      MembersOf(candidate.split, lengths_tokens, order);
  if (members.second.empty()) return;
  candidate.second_bound =
      bounds.StepSeconds(bounds.SlowestGroupSeconds(members.second));
  candidate.bound =
      bounds.SlowestGroupSeconds(members.first) + candidate.second_bound;
  candidates.push_back(candidate);
}

// The filler tokens that just fill the first phase after the `k` longest
// sequences: fillers, longest or shortest first, join until the phase's
// least GPU-seconds reach `filled_gpu_seconds`.
double BalancedFillerTokens(int k, bool longest_fillers,
                            double filled_gpu_seconds,
                            absl::Span<const int64_t> lengths_tokens,
                            const std::vector<int>& order,
                            const SequenceBounds& bounds) {
  const int n = static_cast<int>(order.size());
  double gpu_seconds = 0;
  for (int i = 0; i < k; ++i) gpu_seconds += bounds.GpuSeconds(order[i]);
  double filler_tokens = 0;
  for (int i = 0; i < n - k && gpu_seconds < filled_gpu_seconds; ++i) {
    const int index = order[longest_fillers ? k + i : n - 1 - i];
    gpu_seconds += bounds.GpuSeconds(index);
    filler_tokens += static_cast<double>(lengths_tokens[index]);
  }
  return filler_tokens;
}

// Every split the search tries, in enumeration order: for k = 1, 2, 4, ...
// longest sequences (cut only between distinct lengths), fillers the
// longest or the shortest of the rest, at short_share_steps shares of the
// rest's tokens and at the share that just fills the first phase.
std::vector<Candidate> EnumerateCandidates(
    const CostModel& cost_model, absl::Span<const int64_t> lengths_tokens,
    const PhasedPlannerOptions& options, const std::vector<int>& order,
    const SequenceBounds& bounds) {
  const int n = static_cast<int>(order.size());
  std::vector<Candidate> candidates;
  const double num_gpus = cost_model.cluster().NumGpus();
  const double longest_alone = bounds.AloneSeconds(order.front());
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
        AddCandidate({k, longest_fillers, rest_tokens * step / steps},
                     /*balanced=*/false, lengths_tokens, order, bounds,
                     candidates);
      }
      const double filler_tokens =
          BalancedFillerTokens(k, longest_fillers, num_gpus * longest_alone,
                               lengths_tokens, order, bounds);
      AddCandidate({k, longest_fillers, filler_tokens}, /*balanced=*/true,
                   lengths_tokens, order, bounds, candidates);
    }
  }
  return candidates;
}

// Best-first, so that a fast plan is found early and the bounds of the
// rest rule them out: the balanced splits (every over-filled split's bound
// is about the same, so the bounds cannot rank those), then the rest by
// bound. The stable sort keeps the enumeration order among equals.
void SortBestFirst(std::vector<Candidate>& candidates) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.balanced != b.balanced) return a.balanced;
                     return a.bound < b.bound;
                   });
}

// Whether a candidate at least `bound` seconds cannot beat `best` (the
// margin covers the bound's rounding).
bool CannotWin(double bound, const PhasedPlan& best) {
  return bound * (1 - 1e-9) >= best.predicted_step_seconds;
}

// Plans `candidate`'s two phases, adding the sequences each plans to
// `sequences_planned`, and keeps the result in `best` where it is predicted
// strictly faster. With skip_bounded_candidates, the second phase is not
// planned where the first's time and the second's bound cannot win.
absl::Status TryCandidate(const Planner& planner, const CostModel& cost_model,
                          absl::Span<const int64_t> lengths_tokens,
                          const PhasedPlannerOptions& options,
                          const std::vector<int>& order,
                          const Candidate& candidate,
                          int64_t& sequences_planned, PhasedPlan& best) {
  const SplitMembers members =
      MembersOf(candidate.split, lengths_tokens, order);
  sequences_planned += static_cast<int64_t>(members.first.size());
  absl::StatusOr<Plan> phase1 =
      PlanPhase(planner, lengths_tokens, members.first);
  if (!phase1.ok()) return phase1.status();
  // Priced again on the whole batch, as PredictPhasedPlan prices it: under
  // ZeRO-3 a phase's lockstep padding is the batch's shortest sequence, not
  // the phase's (LockstepSeconds).
  PredictPlan(cost_model, lengths_tokens, *phase1);
  if (options.skip_bounded_candidates &&
      CannotWin(phase1->slowest_group_seconds + candidate.second_bound, best)) {
    return absl::OkStatus();
  }
  sequences_planned += static_cast<int64_t>(members.second.size());
  absl::StatusOr<Plan> phase2 =
      PlanPhase(planner, lengths_tokens, members.second);
  if (!phase2.ok()) return phase2.status();
  PhasedPlan planned;
  planned.strategy = best.strategy;
  planned.phases.push_back(*std::move(phase1));
  planned.phases.push_back(*std::move(phase2));
  PredictPhasedPlan(cost_model, lengths_tokens, planned);
  if (planned.predicted_step_seconds < best.predicted_step_seconds) {
    planned.lower_bound_seconds = best.lower_bound_seconds;
    best = std::move(planned);
  }
  return absl::OkStatus();
}

// Tries the candidates in order, keeping the fastest plan in `best`. With
// skip_bounded_candidates, skips those whose bounds cannot win and stops
// before the sequences planned would pass the budget (see
// PhasedPlannerOptions).
absl::Status SearchCandidates(const Planner& planner,
                              const CostModel& cost_model,
                              absl::Span<const int64_t> lengths_tokens,
                              const PhasedPlannerOptions& options,
                              const std::vector<int>& order,
                              const std::vector<Candidate>& candidates,
                              PhasedPlan& best) {
  const int n = static_cast<int>(order.size());
  const int64_t budget =
      std::min(options.max_sequences_planned,
               std::max(options.min_sequences_planned,
                        static_cast<int64_t>(options.batches_planned * n)));
  int64_t sequences_planned = 0;
  for (const Candidate& candidate : candidates) {
    if (options.skip_bounded_candidates) {
      if (CannotWin(candidate.bound, best)) {
        // The rest are sorted by bound: none of them can win either.
        if (candidate.balanced) continue;
        break;
      }
      if (sequences_planned + n > budget) break;
    }
    const absl::Status tried =
        TryCandidate(planner, cost_model, lengths_tokens, options, order,
                     candidate, sequences_planned, best);
    if (!tried.ok()) return tried;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PhasedPlan> PlanPhasedBatch(
    const CostModel& cost_model, absl::Span<const int64_t> lengths_tokens,
    const PhasedPlannerOptions& options) {
  const Planner planner(cost_model, options.planner_options);
  absl::StatusOr<PhasedPlan> best = PlanSingleLayout(planner, lengths_tokens);
  if (!best.ok()) return best.status();
  // The per-sequence bounds behind the batch's lower bound are priced again
  // only for a search.
  const double lower_bound = best->lower_bound_seconds;
  if (lower_bound > 0 && best->GapToLowerBound() < options.min_gap_to_try) {
    return best;
  }
  absl::StatusOr<SequenceBounds> bounds =
      MakeSequenceBounds(cost_model, lengths_tokens, options);
  if (!bounds.ok()) return bounds.status();
  if (lower_bound <= 0) {
    best->lower_bound_seconds =
        bounds->StepSeconds(bounds->SlowestGroupSeconds());
    if (best->GapToLowerBound() < options.min_gap_to_try) return best;
  }
  // The batch's indices, longest first; ties by index, so the search is
  // deterministic.
  const std::vector<int> order = LongestFirst(lengths_tokens);
  std::vector<Candidate> candidates =
      EnumerateCandidates(cost_model, lengths_tokens, options, order, *bounds);
  if (options.skip_bounded_candidates) SortBestFirst(candidates);
  const absl::Status searched = SearchCandidates(
      planner, cost_model, lengths_tokens, options, order, candidates, *best);
  if (!searched.ok()) return searched;
  for (Plan& phase : best->phases) phase.strategy = best->strategy;
  return best;
}

}  // namespace dcp
