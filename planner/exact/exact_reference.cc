#include "planner/exact/exact_reference.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/layout.h"

namespace dcp {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// For one SP size, over every subset of the batch: the best group time of
// running exactly that subset (split into micro-batches), the largest
// backward among the micro-batches of that best split, and the split.
struct SizeTable {
  std::vector<double> group_seconds;
  std::vector<double> last_backward_seconds;
  // The first micro-batch of the best split (the rest is the split of what
  // remains), 0 for the empty set.
  std::vector<uint32_t> first_micro_batch;
  std::vector<int> layers;  // fewest layers per micro-batch subset, -1: none
  // The best group time plus the all-reduce its last micro-batch leaves
  // exposed, over every split and every choice of that last micro-batch;
  // the last micro-batch of that choice (the rest split as above).
  std::vector<double> hidden_seconds;
  std::vector<uint32_t> last_micro_batch;
  // One micro-batch of exactly the subset: seconds (infinite if it fits at
  // no recompute) and backward seconds.
  std::vector<double> micro_seconds;
  std::vector<double> micro_backward;
};

SizeTable BuildSizeTable(const CostModel& cost_model, int sp_size,
                         absl::Span<const int64_t> lengths,
                         double allreduce_seconds) {
  const int n = static_cast<int>(lengths.size());
  const uint32_t full = (1u << n) - 1;
  SizeTable table;
  std::vector<double>& micro_seconds = table.micro_seconds;
  std::vector<double>& micro_backward = table.micro_backward;
  micro_seconds.assign(full + 1, kInfinity);
  micro_backward.assign(full + 1, 0);
  table.layers.assign(full + 1, -1);
  for (uint32_t mask = 1; mask <= full; ++mask) {
    MicroBatchShape shape;
    shape.sp_size = sp_size;
    for (int i = 0; i < n; ++i) {
      if (mask & (1u << i)) shape.AddSequence(lengths[i]);
    }
    std::optional<int> layers = cost_model.MinCheckpointedLayers(shape);
    if (!layers) continue;
    const MicroBatchCost cost = cost_model.MicroBatch(shape, *layers);
    micro_seconds[mask] = cost.total_seconds;
    micro_backward[mask] = cost.backward_seconds;
    table.layers[mask] = *layers;
  }
  table.group_seconds.assign(full + 1, kInfinity);
  table.last_backward_seconds.assign(full + 1, 0);
  table.first_micro_batch.assign(full + 1, 0);
  table.group_seconds[0] = 0;
  for (uint32_t mask = 1; mask <= full; ++mask) {
    // The micro-batch holding the lowest sequence of `mask`, then the rest.
    const uint32_t lowest = mask & (~mask + 1);
    const uint32_t others = mask ^ lowest;
    for (uint32_t sub = others;; sub = (sub - 1) & others) {
      const uint32_t micro = sub | lowest;
      const double seconds =
          micro_seconds[micro] + table.group_seconds[mask ^ micro];
      if (seconds < table.group_seconds[mask]) {
        table.group_seconds[mask] = seconds;
        table.first_micro_batch[mask] = micro;
        table.last_backward_seconds[mask] = std::max(
            micro_backward[micro], table.last_backward_seconds[mask ^ micro]);
      }
      if (sub == 0) break;
    }
  }
  table.hidden_seconds.assign(full + 1, kInfinity);
  table.last_micro_batch.assign(full + 1, 0);
  // Nothing hides the all-reduce of an empty group.
  table.hidden_seconds[0] = allreduce_seconds;
  for (uint32_t mask = 1; mask <= full; ++mask) {
    for (uint32_t last = mask; last != 0; last = (last - 1) & mask) {
      const double seconds =
          micro_seconds[last] +
          std::max(0.0, allreduce_seconds - micro_backward[last]) +
          table.group_seconds[mask ^ last];
      if (seconds < table.hidden_seconds[mask]) {
        table.hidden_seconds[mask] = seconds;
        table.last_micro_batch[mask] = last;
      }
    }
  }
  return table;
}

// Over groups, for every subset of the batch: the assignment of exactly
// that subset minimising the largest per-group `value`.
class MinMaxAssignment {
 public:
  MinMaxAssignment(const std::vector<const std::vector<double>*>& values,
                   uint32_t full)
      : best_(values.size(), std::vector<double>(full + 1)),
        choice_(values.size(), std::vector<uint32_t>(full + 1)) {
    const size_t k = values.size();
    for (uint32_t mask = 0; mask <= full && k > 0; ++mask) {
      best_[0][mask] = (*values[0])[mask];
      choice_[0][mask] = mask;
    }
    for (size_t g = 1; g < k; ++g) {
      const std::vector<double>& value = *values[g];
      for (uint32_t mask = 0; mask <= full; ++mask) {
        double least = kInfinity;
        uint32_t chosen = 0;
        for (uint32_t sub = mask;; sub = (sub - 1) & mask) {
          const double v = std::max(best_[g - 1][mask ^ sub], value[sub]);
          if (v < least) {
            least = v;
            chosen = sub;
          }
          if (sub == 0) break;
        }
        best_[g][mask] = least;
        choice_[g][mask] = chosen;
      }
    }
  }
  /// The least largest value of an assignment of `mask` (0 groups: 0 for
  /// the empty set, else infinite).
  double Best(uint32_t mask) const {
    if (best_.empty()) return mask == 0 ? 0 : kInfinity;
    return best_.back()[mask];
  }
  /// Each group's subset in that assignment.
  std::vector<uint32_t> Subsets(uint32_t mask) const {
    std::vector<uint32_t> subsets(best_.size(), 0);
    for (size_t g = best_.size(); g-- > 0;) {
      subsets[g] = choice_[g][mask];
      mask ^= subsets[g];
    }
    return subsets;
  }

 private:
  std::vector<std::vector<double>> best_;
  std::vector<std::vector<uint32_t>> choice_;
};

// The best step in which the designated group, whose times are `own`, is
// the slowest for sure: its subset and last micro-batch enumerated, the
// other groups' (`others`) best time over the rest no more than its own;
// the step is then its time plus the all-reduce its last micro-batch leaves
// exposed. `step` is infinite when there is none.
struct SlowestChoice {
  double step = kInfinity;
  uint32_t subset = 0;
  uint32_t last = 0;
};

SlowestChoice BestAsTheSlowest(const SizeTable& own,
                               const MinMaxAssignment& others, uint32_t full,
                               double allreduce) {
  SlowestChoice best;
  for (uint32_t subset = 1; subset <= full; ++subset) {
    const double rest = others.Best(full ^ subset);
    if (rest >= kInfinity) continue;
    for (uint32_t last = subset; last != 0; last = (last - 1) & subset) {
      const double time =
          own.micro_seconds[last] + own.group_seconds[subset ^ last];
      if (!(time < kInfinity) || rest > time) continue;
      const double step =
          time + std::max(0.0, allreduce - own.micro_backward[last]);
      if (step < best.step) best = {step, subset, last};
    }
  }
  return best;
}

// The micro-batch of the sequences in `micro` at the table's fewest layers.
MicroBatchPlan MicroBatchOf(const SizeTable& table, uint32_t micro, int n) {
  MicroBatchPlan micro_batch;
  for (int i = 0; i < n; ++i) {
    if (micro & (1u << i)) micro_batch.sequence_indices.push_back(i);
  }
  micro_batch.checkpointed_layers = table.layers[micro];
  return micro_batch;
}

// The group of `sp_size` ranks from `first_rank` running `subset` of the
// `n` sequences, with `table` the one of its SP size: the table's best split
// of it without `last` (0: none), largest backward last, then `last`.
GroupPlan GroupOfSubset(const SizeTable& table, int n, int sp_size,
                        int first_rank, uint32_t subset, uint32_t last) {
  GroupPlan group;
  for (int r = 0; r < sp_size; ++r) group.ranks.push_back(first_rank + r);
  std::vector<std::pair<double, MicroBatchPlan>> micro_batches;
  for (uint32_t rest = subset ^ last; rest != 0;) {
    const uint32_t micro = table.first_micro_batch[rest];
    micro_batches.push_back(
        {table.micro_backward[micro], MicroBatchOf(table, micro, n)});
    rest ^= micro;
  }
  std::stable_sort(
      micro_batches.begin(), micro_batches.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& entry : micro_batches) {
    group.micro_batches.push_back(std::move(entry.second));
  }
  if (last != 0) group.micro_batches.push_back(MicroBatchOf(table, last, n));
  return group;
}

}  // namespace

absl::StatusOr<ExactReference> ComputeExactReference(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens) {
  absl::StatusOr<std::vector<int>> sizes =
      SmallBatchSpSizes(cost_model, sp_sizes, lengths_tokens,
                        kMaxExactReferenceSequences, "the exact reference");
  if (!sizes.ok()) return sizes.status();
  const int n = static_cast<int>(lengths_tokens.size());
  const uint32_t full = (1u << n) - 1;
  const double allreduce = cost_model.GradientAllReduceSeconds();
  std::vector<SizeTable> tables;
  for (int size : *sizes) {
    tables.push_back(
        BuildSizeTable(cost_model, size, lengths_tokens, allreduce));
  }

  const std::vector<std::vector<int>> layouts =
      PlaceableLayouts(*sizes, cost_model.cluster());
  ExactReference result;
  double lower = kInfinity;
  double best_upper = kInfinity;
  for (const std::vector<int>& layout : layouts) {
    absl::StatusOr<std::vector<int>> first_ranks =
        PlaceGroups(layout, cost_model.cluster());
    if (!first_ranks.ok()) continue;
    ++result.layouts;
    std::vector<size_t> table_of;
    for (int size : layout) {
      table_of.push_back(std::find(sizes->begin(), sizes->end(), size) -
                         sizes->begin());
    }
    // One group is designated to be the slowest: its all-reduce exposure
    // counts, the others' times only. The least such value over every
    // designation is at most the optimum (the optimum's slowest group is
    // one designation); the plan it picks is a real plan.
    for (size_t d = 0; d < layout.size(); ++d) {
      if (d > 0 && layout[d] == layout[d - 1]) continue;  // same size
      std::vector<const std::vector<double>*> values;
      values.push_back(&tables[table_of[d]].hidden_seconds);
      std::vector<size_t> order = {d};
      for (size_t g = 0; g < layout.size(); ++g) {
        if (g == d) continue;
        values.push_back(&tables[table_of[g]].group_seconds);
        order.push_back(g);
      }
      const MinMaxAssignment designated(values, full);
      const double value = designated.Best(full);
      if (value >= kInfinity) continue;
      // Every plan adds the optimizer step to its slowest group.
      lower = std::min(lower, value + cost_model.OptimizerStepSeconds());
      // Plans where the designated group is the slowest for sure: its
      // subset and last micro-batch enumerated, the others' times no more
      // than its own; its step is then that group's time plus its exposure.
      const std::vector<const std::vector<double>*> other_values(
          values.begin() + 1, values.end());
      const MinMaxAssignment others(other_values, full);
      const SizeTable& own = tables[table_of[d]];
      const SlowestChoice slowest =
          BestAsTheSlowest(own, others, full, allreduce);
      // Two candidate plans: the designated bound's assignment, and the
      // best with the designated group surely the slowest.
      std::vector<std::vector<uint32_t>> candidates = {
          designated.Subsets(full)};
      if (slowest.step < kInfinity) {
        std::vector<uint32_t> subsets = {slowest.subset};
        for (uint32_t other : others.Subsets(full ^ slowest.subset)) {
          subsets.push_back(other);
        }
        candidates.push_back(std::move(subsets));
      }
      for (size_t c = 0; c < candidates.size(); ++c) {
        const std::vector<uint32_t>& subsets = candidates[c];
        Plan plan;
        plan.strategy = "exact";
        for (size_t k = 0; k < order.size(); ++k) {
          const size_t g = order[k];
          const SizeTable& table = tables[table_of[g]];
          // The designated group (first) ends with its chosen micro-batch.
          uint32_t last = 0;
          if (k == 0 && subsets[0] != 0) {
            last = c == 0 ? table.last_micro_batch[subsets[0]] : slowest.last;
          }
          plan.groups.push_back(GroupOfSubset(
              table, n, layout[g], (*first_ranks)[g], subsets[k], last));
        }
        PredictPlan(cost_model, lengths_tokens, plan);
        if (plan.predicted_step_seconds < best_upper) {
          best_upper = plan.predicted_step_seconds;
          result.best_plan = std::move(plan);
        }
      }
    }
  }
  if (best_upper >= kInfinity) {
    return absl::ResourceExhaustedError(
        "exact reference: some sequence fits memory on no SP size");
  }
  result.upper_seconds = best_upper;
  result.lower_seconds = std::min(lower, best_upper);
  return result;
}

}  // namespace dcp
