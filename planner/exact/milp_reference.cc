#include "planner/exact/milp_reference.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "planner/plan/batch_check.h"
#include "planner/exact/cbc_milp.h"
#include "planner/exact/layout_milp.h"
#include "planner/plan/layout.h"

namespace dcp {
namespace {

// The cost model on `sp_size` as the MILP's affine terms over the batch
// (AffineSize); FAILED_PRECONDITION where they do not reproduce it.
absl::StatusOr<AffineSize> MakeAffineSize(const CostModel& cost_model,
                                          int sp_size,
                                          absl::Span<const int64_t> lengths) {
  const int n = static_cast<int>(lengths.size());
  const int layers = cost_model.model().num_layers;
  AffineSize a;
  a.sp_size = sp_size;
  // The fixed terms: one micro-batch of two sequences against two of one.
  const std::vector<int64_t> probe = {lengths[0], lengths[n > 1 ? 1 : 0]};
  auto fixed = [&](int k) {
    const MicroBatchCost one =
        cost_model.MicroBatch(ShapeOf({probe[0]}, sp_size), k);
    const MicroBatchCost two =
        cost_model.MicroBatch(ShapeOf({probe[1]}, sp_size), k);
    const MicroBatchCost both =
        cost_model.MicroBatch(ShapeOf(probe, sp_size), k);
    return std::pair<double, double>(
        one.total_seconds + two.total_seconds - both.total_seconds,
        one.backward_seconds + two.backward_seconds - both.backward_seconds);
  };
  const auto [total0, backward0] = fixed(0);
  const auto [total1, backward1] = fixed(1);
  a.fixed_total = total0;
  a.fixed_backward = backward0;
  a.fixed_recompute = total1 - total0;
  for (int i = 0; i < n; ++i) {
    const MicroBatchShape shape = ShapeOf({lengths[i]}, sp_size);
    const MicroBatchCost c0 = cost_model.MicroBatch(shape, 0);
    const MicroBatchCost c1 = cost_model.MicroBatch(shape, 1);
    a.total.push_back(c0.total_seconds - total0);
    a.backward.push_back(c0.backward_seconds - backward0);
    a.recompute.push_back(c1.total_seconds - total1 - a.total.back());
    a.tokens.push_back(shape.tokens_per_rank);
  }
  for (int k = 0; k <= layers; ++k) {
    a.capacity.push_back(cost_model.MaxTokensPerRank(k, sp_size));
  }
  // Capacity need not grow at the last levels (the recompute's working set
  // can dominate there): a sequence fits if some level holds it.
  const int64_t most = *std::max_element(a.capacity.begin(), a.capacity.end());
  for (int i = 0; i < n; ++i) {
    a.fits.push_back(a.tokens[i] <= most ? 1 : 0);
  }
  // The affine form must reproduce the cost model on the whole batch.
  const MicroBatchShape whole = ShapeOf(lengths, sp_size);
  for (int k : {0, layers}) {
    double total = a.fixed_total + k * a.fixed_recompute;
    double backward = a.fixed_backward + k * a.fixed_recompute;
    for (int i = 0; i < n; ++i) {
      total += a.total[i] + k * a.recompute[i];
      backward += a.backward[i] + k * a.recompute[i];
    }
    const MicroBatchCost cost = cost_model.MicroBatch(whole, k);
    if (std::abs(total - cost.total_seconds) > 1e-7 * cost.total_seconds ||
        std::abs(backward - cost.backward_seconds) >
            1e-7 * cost.backward_seconds) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "MILP reference: the cost model is not affine in the sequences of "
          "a micro-batch on SP %d at %d recomputed layers (%.9g s summed, "
          "%.9g s priced); the MILP cannot express it",
          sp_size, k, total, cost.total_seconds));
    }
  }
  return a;
}

bool IsOn(const std::vector<double>& values, int column) {
  return column >= 0 && values[column] > 0.5;
}

// A group's micro-batches from its used slots, by ascending backward time
// (stable); in the slowest group, the slot chosen to run last runs last.
void AddMicroBatches(const CostModel& cost_model,
                     absl::Span<const int64_t> lengths,
                     const std::vector<LayoutMilp::Slot>& slots, bool slowest,
                     const std::vector<double>& values, GroupPlan& group) {
  std::optional<MicroBatchPlan> last;
  std::vector<std::pair<double, MicroBatchPlan>> rest;
  for (const LayoutMilp::Slot& slot : slots) {
    MicroBatchPlan micro_batch;
    for (int i = 0; i < static_cast<int>(slot.x.size()); ++i) {
      if (IsOn(values, slot.x[i])) micro_batch.sequence_indices.push_back(i);
    }
    if (micro_batch.sequence_indices.empty()) continue;
    micro_batch.checkpointed_layers = 0;
    for (int k = 0; k < static_cast<int>(slot.level.size()); ++k) {
      if (IsOn(values, slot.level[k])) micro_batch.checkpointed_layers = k;
    }
    if (slowest && IsOn(values, slot.last)) {
      last = std::move(micro_batch);
    } else {
      const double backward =
          cost_model
              .MicroBatch(
                  ShapeOfSequences(lengths, micro_batch.sequence_indices,
                                   group.sp_size()),
                  micro_batch.checkpointed_layers)
              .backward_seconds;
      rest.push_back({backward, std::move(micro_batch)});
    }
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& x, const auto& y) {
    return x.first < y.first;
  });
  for (auto& entry : rest)
    group.micro_batches.push_back(std::move(entry.second));
  if (last) group.micro_batches.push_back(*std::move(last));
}

// The plan the solution `values` describes, the slowest group first,
// priced by PredictPlan.
Plan RebuildPlan(const CostModel& cost_model, absl::Span<const int64_t> lengths,
                 const std::vector<int>& layout,
                 const std::vector<int>& first_ranks, const LayoutMilp& milp,
                 const std::vector<double>& values) {
  const int groups = static_cast<int>(layout.size());
  int slowest = 0;
  for (int g = 0; g < groups; ++g) {
    if (IsOn(values, milp.designated[g])) slowest = g;
  }
  std::vector<int> order = {slowest};
  for (int g = 0; g < groups; ++g) {
    if (g != slowest) order.push_back(g);
  }
  Plan plan;
  plan.strategy = "milp";
  for (int g : order) {
    GroupPlan group;
    for (int r = 0; r < layout[g]; ++r)
      group.ranks.push_back(first_ranks[g] + r);
    AddMicroBatches(cost_model, lengths, milp.slots[g], g == slowest, values,
                    group);
    plan.groups.push_back(std::move(group));
  }
  PredictPlan(cost_model, lengths, plan);
  return plan;
}

struct LayoutResult {
  MilpSolution solution;
  std::optional<Plan> plan;
  int columns = 0, rows = 0;
};

// One layout's MILP (see milp_reference.h), solved; the plan rebuilt from
// its solution and priced by PredictPlan.
absl::StatusOr<LayoutResult> SolveLayout(
    const CostModel& cost_model, absl::Span<const int64_t> lengths,
    const std::vector<int>& layout, const std::vector<int>& first_ranks,
    const std::vector<const AffineSize*>& affine, double upper_bound,
    double time_limit, const MilpReferenceOptions& options) {
  const int n = static_cast<int>(lengths.size());
  const int layers = cost_model.model().num_layers;
  const double allreduce =
      cost_model.GradientAllReduceSeconds() * kMilpMilliseconds;
  if (!EverySequenceFits(affine, n)) {  // no plan on this layout
    LayoutResult none;
    none.solution.proven = true;
    none.solution.best_bound = MilpProblem::kInfinity;
    return none;
  }
  const double big = StepBigM(affine, n, layers, allreduce, upper_bound);
  const LayoutMilp milp =
      BuildLayoutMilp(layout, affine, n, layers, allreduce, big);
  if (milp.problem.num_columns() > options.max_columns) {
    return absl::ResourceExhaustedError(
        absl::StrCat("MILP reference: layout {", absl::StrJoin(layout, ","),
                     "} needs ", milp.problem.num_columns(),
                     " columns, over the limit of ", options.max_columns,
                     "; use fewer sequences or GPUs, or raise max_columns"));
  }
  LayoutResult result;
  result.columns = milp.problem.num_columns();
  result.rows = milp.problem.num_rows();
  // The MILP prices the step without the optimizer step (the same for
  // every plan); it is added back to the objective and bound below.
  const double optimizer = cost_model.OptimizerStepSeconds();
  const double cutoff =
      std::isfinite(upper_bound)
          ? (upper_bound - optimizer) * kMilpMilliseconds * (1 + 1e-9)
          : MilpProblem::kInfinity;
  absl::StatusOr<MilpSolution> solution =
      SolveWithCbc(milp.problem, time_limit, options.relative_gap, cutoff);
  if (!solution.ok()) return solution.status();
  result.solution = *std::move(solution);
  result.solution.objective =
      result.solution.objective / kMilpMilliseconds + optimizer;
  result.solution.best_bound =
      result.solution.best_bound / kMilpMilliseconds + optimizer;
  if (!result.solution.feasible) return result;
  result.plan = RebuildPlan(cost_model, lengths, layout, first_ranks, milp,
                            result.solution.values);
  return result;
}

}  // namespace

absl::StatusOr<MilpReference> ComputeMilpReference(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens,
    const MilpReferenceOptions& options) {
  absl::StatusOr<std::vector<int>> sizes =
      SmallBatchSpSizes(cost_model, sp_sizes, lengths_tokens,
                        kMaxMilpReferenceSequences, "the MILP reference");
  if (!sizes.ok()) return sizes.status();
  const int n = static_cast<int>(lengths_tokens.size());
  std::vector<AffineSize> affine;
  for (int size : *sizes) {
    absl::StatusOr<AffineSize> a =
        MakeAffineSize(cost_model, size, lengths_tokens);
    if (!a.ok()) return a.status();
    affine.push_back(*std::move(a));
  }
  for (int i = 0; i < n; ++i) {
    if (!affine.back().fits[i]) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "MILP reference: sequence ", i, " (", lengths_tokens[i],
          " tokens) fits memory on no SP size even with full recompute"));
    }
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  MilpReference result;
  double upper = options.upper_bound_seconds;
  double lower = MilpProblem::kInfinity;
  bool proven = true;
  const std::vector<std::vector<int>> layouts =
      PlaceableLayouts(*sizes, cost_model.cluster());
  for (const std::vector<int>& layout : layouts) {
    const double left = options.time_limit_seconds - elapsed();
    if (left <= 0) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "MILP reference: %d of %d layouts solved in the time limit of "
          "%.0f s; raise time_limit_seconds or use a smaller batch",
          result.layouts, layouts.size(), options.time_limit_seconds));
    }
    const std::vector<int> first_ranks =
        *PlaceGroups(layout, cost_model.cluster());
    std::vector<const AffineSize*> of_group;
    for (int size : layout) {
      of_group.push_back(&affine[std::find(sizes->begin(), sizes->end(), size) -
                                 sizes->begin()]);
    }
    absl::StatusOr<LayoutResult> solved = SolveLayout(
        cost_model, lengths_tokens, layout, first_ranks, of_group, upper,
        std::min(left, options.layout_time_limit_seconds), options);
    if (!solved.ok()) return solved.status();
    ++result.layouts;
    result.max_columns = std::max(result.max_columns, solved->columns);
    result.max_rows = std::max(result.max_rows, solved->rows);
    const MilpSolution& s = solved->solution;
    if (s.proven) ++result.layouts_proven;
    proven = proven && s.proven;
    // Proven: the optimum is within relative_gap of the incumbent.
    lower = std::min(
        lower,
        s.proven && s.feasible
            ? std::max(s.best_bound, s.objective * (1 - options.relative_gap))
            : s.best_bound);
    if (solved->plan && solved->plan->predicted_step_seconds < upper) {
      upper = solved->plan->predicted_step_seconds;
      result.best_plan = *std::move(solved->plan);
    }
    if (options.progress) {
      options.progress(absl::StrFormat(
          "layout {%s}: %d columns, %s, MILP %.6f s (bound %.6f s), best "
          "%.6f s (plan %.6f), %.1f s elapsed",
          absl::StrJoin(layout, ","), solved->columns,
          s.proven ? "proven" : "time limit", s.objective, s.best_bound, upper,
          solved->plan ? solved->plan->predicted_step_seconds : -1.0,
          elapsed()));
    }
  }
  if (!std::isfinite(upper)) {
    return absl::ResourceExhaustedError(
        "MILP reference: no layout holds the batch");
  }
  result.upper_seconds = upper;
  result.lower_seconds = std::min(lower, upper);
  // Layouts left open by the time limit may still have bounds above the
  // best plan: then the two ends meet all the same.
  result.proven =
      proven ||
      result.lower_seconds >= result.upper_seconds * (1 - options.relative_gap);
  return result;
}

}  // namespace dcp
