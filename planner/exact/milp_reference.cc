#include "planner/exact/milp_reference.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "planner/plan/batch_check.h"
#include "planner/exact/cbc_milp.h"
#include "planner/plan/layout.h"

namespace dcp {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// The MILP works in milliseconds: step times of seconds keep its
// coefficients well inside CBC's tolerances.
constexpr double kMilliseconds = 1e3;

// The cost model on one SP size as affine terms: a micro-batch of the set
// X at recompute level k takes
//   total(X, k)    = fixed_total + k * fixed_recompute
//                    + sum_{i in X} (total_i + k * recompute_i),
//   backward(X, k) = fixed_backward + k * fixed_recompute
//                    + sum_{i in X} (backward_i + k * recompute_i)
// seconds, and fits at level k when its tokens per rank are at most
// capacity[k].
struct AffineSize {
  int sp_size = 0;
  double fixed_total = 0, fixed_backward = 0, fixed_recompute = 0;
  std::vector<double> total, backward, recompute;
  std::vector<int64_t> tokens;    // per rank, per sequence
  std::vector<int64_t> capacity;  // per level 0..num_layers
  std::vector<char> fits;         // sequence fits at some level
};

MicroBatchShape ShapeOfIndices(absl::Span<const int64_t> lengths,
                               const std::vector<int>& indices, int sp_size) {
  MicroBatchShape shape;
  shape.sp_size = sp_size;
  for (int i : indices) shape.AddSequence(lengths[i]);
  return shape;
}

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
  std::vector<int> all(n);
  for (int i = 0; i < n; ++i) all[i] = i;
  const MicroBatchShape whole = ShapeOfIndices(lengths, all, sp_size);
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

// Largest sum of `value` over sequences whose tokens fit `capacity`, as
// the fractional knapsack bounds it (an upper bound on any integer pick).
double KnapsackBound(const AffineSize& a, const std::vector<double>& value,
                     int64_t capacity) {
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(value.size()); ++i) {
    if (a.fits[i]) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](int x, int y) {
    return value[x] * a.tokens[y] > value[y] * a.tokens[x];
  });
  double sum = 0;
  double left = static_cast<double>(capacity);
  for (int i : order) {
    if (left <= 0) break;
    const double take = std::min(1.0, left / std::max<int64_t>(1, a.tokens[i]));
    sum += take * value[i];
    left -= take * a.tokens[i];
  }
  return sum;
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
  const int groups = static_cast<int>(layout.size());
  const double allreduce =
      cost_model.GradientAllReduceSeconds() * kMilliseconds;
  // Every sequence must fit some group of the layout.
  for (int i = 0; i < n; ++i) {
    bool fits = false;
    for (const AffineSize* a : affine) fits = fits || a->fits[i];
    if (!fits) {  // no plan on this layout
      LayoutResult none;
      none.solution.proven = true;
      none.solution.best_bound = kInfinity;
      return none;
    }
  }
  // A bound on the step: every sequence alone, fully recomputed, one after
  // another on a group it fits, plus the whole all-reduce.
  const int layers = cost_model.model().num_layers;
  double crude = allreduce;
  for (int i = 0; i < n; ++i) {
    double least = kInfinity;
    for (const AffineSize* a : affine) {
      if (!a->fits[i]) continue;
      least =
          std::min(least, a->fixed_total + a->total[i] +
                              layers * (a->fixed_recompute + a->recompute[i]));
    }
    crude += least * kMilliseconds;
  }
  const double big = std::min(crude, upper_bound * kMilliseconds) * 1.001;

  MilpProblem p;
  const int step = p.AddColumn(0, big, 1, false);  // slowest group
  const int exposed = p.AddColumn(0, allreduce, 1, false);
  struct Slot {
    std::vector<int> x;      // column per sequence, -1 where it cannot go
    std::vector<int> level;  // column per level 0..top
    int recompute = -1;      // recompute milliseconds
    int last = -1;           // this slot runs last in its group
  };
  std::vector<std::vector<Slot>> slots(groups);
  std::vector<std::vector<std::pair<int, double>>> group_time(groups);
  std::vector<int> designated(groups), last_backward(groups);
  for (int g = 0; g < groups; ++g) {
    const AffineSize& a = *affine[g];
    // Tokens per rank this group can hold within the bound, and the levels
    // a micro-batch of at most that many tokens needs.
    int64_t fit_tokens = 0;
    int fit_count = 0;
    double least_rate = kInfinity;
    for (int i = 0; i < n; ++i) {
      if (!a.fits[i]) continue;
      fit_tokens += a.tokens[i];
      ++fit_count;
      least_rate = std::min(least_rate, a.total[i] * kMilliseconds /
                                            std::max<int64_t>(1, a.tokens[i]));
    }
    const double share = least_rate > 0
                             ? std::min<double>(fit_tokens, big / least_rate)
                             : static_cast<double>(fit_tokens);
    // Levels up to the first that holds `share` (or the most any holds).
    const double most = static_cast<double>(
        *std::max_element(a.capacity.begin(), a.capacity.end()));
    int top = 0;
    while (top < layers && a.capacity[top] < std::min(share, most)) ++top;
    const int64_t level0 = std::max<int64_t>(1, a.capacity[0]);
    const int count = std::min<int64_t>(
        fit_count, 2 * static_cast<int64_t>(std::ceil(share / level0)) + 1);
    const double recompute_bound =
        (a.fixed_recompute + KnapsackBound(a, a.recompute, a.capacity[top])) *
        kMilliseconds;
    designated[g] = p.AddBinary();
    last_backward[g] = p.AddColumn(0, allreduce, 0, false);
    std::vector<std::pair<int, double>> pick_last;
    for (int m = 0; m < count; ++m) {
      Slot slot;
      for (int i = 0; i < n; ++i)
        slot.x.push_back(a.fits[i] ? p.AddBinary() : -1);
      for (int k = 0; k <= top; ++k) slot.level.push_back(p.AddBinary());
      slot.recompute = p.AddColumn(0, kInfinity, 0, false);
      slot.last = p.AddBinary();
      pick_last.push_back({slot.last, 1});
      // At most one level; a sequence only in a used slot.
      std::vector<std::pair<int, double>> used;
      for (int column : slot.level) used.push_back({column, 1});
      p.AddRow(used, 0, 1);
      for (int column : slot.x) {
        if (column < 0) continue;
        std::vector<std::pair<int, double>> row = {{column, 1}};
        for (int l : slot.level) row.push_back({l, -1});
        p.AddRow(row, -kInfinity, 0);
      }
      // Memory: tokens within the level's capacity.
      std::vector<std::pair<int, double>> memory;
      for (int i = 0; i < n; ++i) {
        if (slot.x[i] >= 0)
          memory.push_back({slot.x[i], static_cast<double>(a.tokens[i])});
      }
      for (int k = 0; k <= top; ++k) {
        memory.push_back({slot.level[k], -static_cast<double>(a.capacity[k])});
      }
      p.AddRow(memory, -kInfinity, 0);
      // Recompute = k (fixed + sum recompute_i x_i) at level k, 0 at level
      // 0 or unused: exact both ways, as a plan cannot pad a group's time
      // (a longer last backward could hide more of the all-reduce).
      std::vector<std::pair<int, double>> none = {{slot.recompute, 1}};
      for (int k = 1; k <= top; ++k) {
        const double m_k = k * recompute_bound;
        std::vector<std::pair<int, double>> at_least = {{slot.recompute, 1}};
        std::vector<std::pair<int, double>> at_most = {{slot.recompute, 1}};
        for (int i = 0; i < n; ++i) {
          if (slot.x[i] < 0) continue;
          at_least.push_back({slot.x[i], -k * a.recompute[i] * kMilliseconds});
          at_most.push_back({slot.x[i], -k * a.recompute[i] * kMilliseconds});
        }
        // Off level k the recompute may be up to top levels' worth.
        const double m_top = top * recompute_bound;
        at_least.push_back({slot.level[k], -m_k});
        at_most.push_back({slot.level[k], m_top});
        const double fixed = k * a.fixed_recompute * kMilliseconds;
        p.AddRow(at_least, fixed - m_k, kInfinity);
        p.AddRow(at_most, -kInfinity, fixed + m_top);
        none.push_back({slot.level[k], -m_k});
      }
      p.AddRow(none, -kInfinity, 0);
      // Used slots first.
      if (m > 0) {
        std::vector<std::pair<int, double>> row;
        for (int l : slots[g].back().level) row.push_back({l, 1});
        for (int l : slot.level) row.push_back({l, -1});
        p.AddRow(row, 0, kInfinity);
      }
      // The group's time, and its last backward at most this slot's when
      // this slot runs last.
      std::vector<std::pair<int, double>> backward = {{last_backward[g], 1}};
      for (int l : slot.level) {
        group_time[g].push_back({l, a.fixed_total * kMilliseconds});
        backward.push_back({l, -a.fixed_backward * kMilliseconds});
      }
      for (int i = 0; i < n; ++i) {
        if (slot.x[i] < 0) continue;
        group_time[g].push_back({slot.x[i], a.total[i] * kMilliseconds});
        backward.push_back({slot.x[i], -a.backward[i] * kMilliseconds});
      }
      group_time[g].push_back({slot.recompute, 1});
      backward.push_back({slot.recompute, -1});
      backward.push_back({slot.last, allreduce});
      p.AddRow(backward, -kInfinity, allreduce);
      slots[g].push_back(std::move(slot));
    }
    if (count > 0) {
      p.AddRow(pick_last, 1, 1);
    } else {
      p.AddRow({{last_backward[g], 1}}, 0, 0);
    }
    // step >= group time; step <= group time when designated.
    std::vector<std::pair<int, double>> at_least = {{step, 1}};
    std::vector<std::pair<int, double>> at_most = {{step, 1},
                                                   {designated[g], big}};
    for (const auto& [column, value] : group_time[g]) {
      at_least.push_back({column, -value});
      at_most.push_back({column, -value});
    }
    p.AddRow(at_least, 0, kInfinity);
    p.AddRow(at_most, -kInfinity, big);
    // exposed >= all-reduce - last backward of the designated group.
    p.AddRow({{exposed, 1}, {designated[g], -allreduce}, {last_backward[g], 1}},
             0, kInfinity);
    // Groups of one size are interchangeable: slower first.
    if (g > 0 && layout[g] == layout[g - 1]) {
      std::vector<std::pair<int, double>> row;
      for (const auto& [column, value] : group_time[g - 1])
        row.push_back({column, value});
      for (const auto& [column, value] : group_time[g])
        row.push_back({column, -value});
      p.AddRow(row, 0, kInfinity);
    }
  }
  std::vector<std::pair<int, double>> one_designated;
  for (int g = 0; g < groups; ++g) one_designated.push_back({designated[g], 1});
  p.AddRow(one_designated, 1, 1);
  for (int i = 0; i < n; ++i) {
    std::vector<std::pair<int, double>> once;
    for (int g = 0; g < groups; ++g) {
      for (const Slot& slot : slots[g]) {
        if (slot.x[i] >= 0) once.push_back({slot.x[i], 1});
      }
    }
    p.AddRow(once, 1, 1);
  }
  if (p.num_columns() > options.max_columns) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "MILP reference: layout {", absl::StrJoin(layout, ","), "} needs ",
        p.num_columns(), " columns, over the limit of ", options.max_columns,
        "; use fewer sequences or GPUs, or raise max_columns"));
  }
  LayoutResult result;
  result.columns = p.num_columns();
  result.rows = p.num_rows();
  // The MILP prices the step without the optimizer step (the same for
  // every plan); it is added back to the objective and bound below.
  const double optimizer = cost_model.OptimizerStepSeconds();
  const double cutoff =
      std::isfinite(upper_bound)
          ? (upper_bound - optimizer) * kMilliseconds * (1 + 1e-9)
          : kInfinity;
  absl::StatusOr<MilpSolution> solution =
      SolveWithCbc(p, time_limit, options.relative_gap, cutoff);
  if (!solution.ok()) return solution.status();
  result.solution = *std::move(solution);
  result.solution.objective = result.solution.objective / kMilliseconds +
                              optimizer;
  result.solution.best_bound = result.solution.best_bound / kMilliseconds +
                               optimizer;
  if (!result.solution.feasible) return result;
  const std::vector<double>& v = result.solution.values;
  auto on = [&](int column) { return column >= 0 && v[column] > 0.5; };
  int slowest = 0;
  for (int g = 0; g < groups; ++g) {
    if (on(designated[g])) slowest = g;
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
    std::optional<MicroBatchPlan> last;
    std::vector<std::pair<double, MicroBatchPlan>> rest;
    for (const Slot& slot : slots[g]) {
      MicroBatchPlan micro_batch;
      for (int i = 0; i < n; ++i) {
        if (on(slot.x[i])) micro_batch.sequence_indices.push_back(i);
      }
      if (micro_batch.sequence_indices.empty()) continue;
      micro_batch.checkpointed_layers = 0;
      for (int k = 0; k < static_cast<int>(slot.level.size()); ++k) {
        if (on(slot.level[k])) micro_batch.checkpointed_layers = k;
      }
      if (g == slowest && on(slot.last)) {
        last = std::move(micro_batch);
      } else {
        const double backward =
            cost_model
                .MicroBatch(
                    ShapeOfIndices(lengths, micro_batch.sequence_indices,
                                   layout[g]),
                    micro_batch.checkpointed_layers)
                .backward_seconds;
        rest.push_back({backward, std::move(micro_batch)});
      }
    }
    std::stable_sort(
        rest.begin(), rest.end(),
        [](const auto& x, const auto& y) { return x.first < y.first; });
    for (auto& entry : rest)
      group.micro_batches.push_back(std::move(entry.second));
    if (last) group.micro_batches.push_back(*std::move(last));
    plan.groups.push_back(std::move(group));
  }
  PredictPlan(cost_model, lengths, plan);
  result.plan = std::move(plan);
  return result;
}

}  // namespace

absl::StatusOr<MilpReference> ComputeMilpReference(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens,
    const MilpReferenceOptions& options) {
  absl::StatusOr<std::vector<int>> sizes = SmallBatchSpSizes(
      cost_model, sp_sizes, lengths_tokens, kMaxMilpReferenceSequences, "the MILP reference");
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
  double lower = kInfinity;
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
