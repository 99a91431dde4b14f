#include "planner/exact/layout_milp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace dcp {
namespace {

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

using Terms = std::vector<std::pair<int, double>>;

// A group's micro-batch slots: how many, the highest recompute level they
// may take, and a bound on one slot's recompute milliseconds per level.
struct GroupSlots {
  int count = 0;
  int top = 0;
  double recompute_bound = 0;
};

// Slots for the tokens per rank the group can hold within `big`
// milliseconds, at the levels a micro-batch of at most that many needs.
GroupSlots SizeGroupSlots(const AffineSize& a, int layers, double big) {
  const int n = static_cast<int>(a.fits.size());
  int64_t fit_tokens = 0;
  int fit_count = 0;
  double least_rate = MilpProblem::kInfinity;
  for (int i = 0; i < n; ++i) {
    if (!a.fits[i]) continue;
    fit_tokens += a.tokens[i];
    ++fit_count;
    least_rate = std::min(least_rate, a.total[i] * kMilpMilliseconds /
                                          std::max<int64_t>(1, a.tokens[i]));
  }
  const double share = least_rate > 0
                           ? std::min<double>(fit_tokens, big / least_rate)
                           : static_cast<double>(fit_tokens);
  // Levels up to the first that holds `share` (or the most any holds).
  const double most = static_cast<double>(
      *std::max_element(a.capacity.begin(), a.capacity.end()));
  GroupSlots slots;
  while (slots.top < layers && a.capacity[slots.top] < std::min(share, most)) {
    ++slots.top;
  }
  const int64_t level0 = std::max<int64_t>(1, a.capacity[0]);
  slots.count = std::min<int64_t>(
      fit_count, 2 * static_cast<int64_t>(std::ceil(share / level0)) + 1);
  slots.recompute_bound =
      (a.fixed_recompute +
       KnapsackBound(a, a.recompute, a.capacity[slots.top])) *
      kMilpMilliseconds;
  return slots;
}

using Slot = LayoutMilp::Slot;

// Builds one layout's MILP (BuildLayoutMilp) column by column and row by
// row, in the order the header gives.
class LayoutMilpBuilder {
 public:
  LayoutMilpBuilder(const std::vector<int>& layout,
                    const std::vector<const AffineSize*>& affine, int n,
                    int layers, double allreduce, double big)
      : layout_(layout),
        affine_(affine),
        n_(n),
        layers_(layers),
        allreduce_(allreduce),
        big_(big) {}

  LayoutMilp Build() && {
    slots_.resize(groups_);
    designated_.resize(groups_);
    last_backward_.resize(groups_);
    group_time_.resize(groups_);
    step_ = p_.AddColumn(0, big_, 1, false);  // slowest group
    exposed_ = p_.AddColumn(0, allreduce_, 1, false);
    for (int g = 0; g < groups_; ++g) AddGroup(g);
    AddPlacementRows();
    return {std::move(p_), std::move(slots_), std::move(designated_)};
  }

 private:
  // Group g: whether it is the slowest, its last backward, its slots, which
  // of them runs last, and its rows on the step and exposed all-reduce.
  void AddGroup(int g) {
    const AffineSize& a = *affine_[g];
    const GroupSlots shape = SizeGroupSlots(a, layers_, big_);
    designated_[g] = p_.AddBinary();
    last_backward_[g] = p_.AddColumn(0, allreduce_, 0, false);
    for (int m = 0; m < shape.count; ++m) AddSlot(g, a, shape);
    if (shape.count > 0) {
      Terms pick_last;
      for (const Slot& slot : slots_[g]) pick_last.push_back({slot.last, 1});
      p_.AddRow(pick_last, 1, 1);
    } else {
      p_.AddRow({{last_backward_[g], 1}}, 0, 0);
    }
    AddStepRows(g);
  }

  // One slot of group g: its columns and the rows on them.
  void AddSlot(int g, const AffineSize& a, const GroupSlots& shape) {
    Slot slot;
    for (int i = 0; i < n_; ++i)
      slot.x.push_back(a.fits[i] ? p_.AddBinary() : -1);
    for (int k = 0; k <= shape.top; ++k) slot.level.push_back(p_.AddBinary());
    slot.recompute = p_.AddColumn(0, MilpProblem::kInfinity, 0, false);
    slot.last = p_.AddBinary();
    // At most one level; a sequence only in a used slot.
    Terms used;
    for (int column : slot.level) used.push_back({column, 1});
    p_.AddRow(used, 0, 1);
    for (int column : slot.x) {
      if (column < 0) continue;
      Terms row = {{column, 1}};
      for (int l : slot.level) row.push_back({l, -1});
      p_.AddRow(row, -MilpProblem::kInfinity, 0);
    }
    // Memory: tokens within the level's capacity.
    Terms memory;
    for (int i = 0; i < n_; ++i) {
      if (slot.x[i] >= 0)
        memory.push_back({slot.x[i], static_cast<double>(a.tokens[i])});
    }
    for (int k = 0; k <= shape.top; ++k) {
      memory.push_back({slot.level[k], -static_cast<double>(a.capacity[k])});
    }
    p_.AddRow(memory, -MilpProblem::kInfinity, 0);
    AddRecomputeRows(a, shape, slot);
    // Used slots first.
    if (!slots_[g].empty()) {
      Terms row;
      for (int l : slots_[g].back().level) row.push_back({l, 1});
      for (int l : slot.level) row.push_back({l, -1});
      p_.AddRow(row, 0, MilpProblem::kInfinity);
    }
    AddTimeRows(g, a, slot);
    slots_[g].push_back(std::move(slot));
  }

  // Recompute = k (fixed + sum recompute_i x_i) at level k, 0 at level 0 or
  // unused: exact both ways, as a plan cannot pad a group's time (a longer
  // last backward could hide more of the all-reduce).
  void AddRecomputeRows(const AffineSize& a, const GroupSlots& shape,
                        const Slot& slot) {
    Terms none = {{slot.recompute, 1}};
    for (int k = 1; k <= shape.top; ++k) {
      const double m_k = k * shape.recompute_bound;
      Terms at_least = {{slot.recompute, 1}};
      for (int i = 0; i < n_; ++i) {
        if (slot.x[i] < 0) continue;
        at_least.push_back(
            {slot.x[i], -k * a.recompute[i] * kMilpMilliseconds});
      }
      Terms at_most = at_least;
      // Off level k the recompute may be up to top levels' worth.
      const double m_top = shape.top * shape.recompute_bound;
      at_least.push_back({slot.level[k], -m_k});
      at_most.push_back({slot.level[k], m_top});
      const double fixed = k * a.fixed_recompute * kMilpMilliseconds;
      p_.AddRow(at_least, fixed - m_k, MilpProblem::kInfinity);
      p_.AddRow(at_most, -MilpProblem::kInfinity, fixed + m_top);
      none.push_back({slot.level[k], -m_k});
    }
    p_.AddRow(none, -MilpProblem::kInfinity, 0);
  }

  // The slot's terms of group g's time, and the group's last backward at
  // most this slot's when this slot runs last.
  void AddTimeRows(int g, const AffineSize& a, const Slot& slot) {
    Terms backward = {{last_backward_[g], 1}};
    for (int l : slot.level) {
      group_time_[g].push_back({l, a.fixed_total * kMilpMilliseconds});
      backward.push_back({l, -a.fixed_backward * kMilpMilliseconds});
    }
    for (int i = 0; i < n_; ++i) {
      if (slot.x[i] < 0) continue;
      group_time_[g].push_back({slot.x[i], a.total[i] * kMilpMilliseconds});
      backward.push_back({slot.x[i], -a.backward[i] * kMilpMilliseconds});
    }
    group_time_[g].push_back({slot.recompute, 1});
    backward.push_back({slot.recompute, -1});
    backward.push_back({slot.last, allreduce_});
    p_.AddRow(backward, -MilpProblem::kInfinity, allreduce_);
  }

  // step >= group g's time, and equal when g is designated; the exposed
  // all-reduce; groups of one size ordered.
  void AddStepRows(int g) {
    Terms at_least = {{step_, 1}};
    Terms at_most = {{step_, 1}, {designated_[g], big_}};
    for (const auto& [column, value] : group_time_[g]) {
      at_least.push_back({column, -value});
      at_most.push_back({column, -value});
    }
    p_.AddRow(at_least, 0, MilpProblem::kInfinity);
    p_.AddRow(at_most, -MilpProblem::kInfinity, big_);
    // exposed >= all-reduce - last backward of the designated group.
    p_.AddRow(
        {{exposed_, 1}, {designated_[g], -allreduce_}, {last_backward_[g], 1}},
        0, MilpProblem::kInfinity);
    // Groups of one size are interchangeable: slower first.
    if (g > 0 && layout_[g] == layout_[g - 1]) {
      Terms row = group_time_[g - 1];
      for (const auto& [column, value] : group_time_[g])
        row.push_back({column, -value});
      p_.AddRow(row, 0, MilpProblem::kInfinity);
    }
  }

  // One designated group; every sequence in exactly one slot.
  void AddPlacementRows() {
    Terms one_designated;
    for (int g = 0; g < groups_; ++g)
      one_designated.push_back({designated_[g], 1});
    p_.AddRow(one_designated, 1, 1);
    for (int i = 0; i < n_; ++i) {
      Terms once;
      for (int g = 0; g < groups_; ++g) {
        for (const Slot& slot : slots_[g]) {
          if (slot.x[i] >= 0) once.push_back({slot.x[i], 1});
        }
      }
      p_.AddRow(once, 1, 1);
    }
  }

  const std::vector<int>& layout_;
  const std::vector<const AffineSize*>& affine_;
  const int n_, layers_;
  const double allreduce_, big_;
  const int groups_ = static_cast<int>(layout_.size());
  MilpProblem p_;
  int step_ = -1, exposed_ = -1;
  std::vector<std::vector<Slot>> slots_;
  std::vector<int> designated_, last_backward_;
  std::vector<Terms> group_time_;  // per group: its time, as terms
};

}  // namespace

bool EverySequenceFits(const std::vector<const AffineSize*>& affine, int n) {
  for (int i = 0; i < n; ++i) {
    bool fits = false;
    for (const AffineSize* a : affine) fits = fits || a->fits[i];
    if (!fits) return false;
  }
  return true;
}

double StepBigM(const std::vector<const AffineSize*>& affine, int n, int layers,
                double allreduce, double upper_bound) {
  double crude = allreduce;
  for (int i = 0; i < n; ++i) {
    double least = MilpProblem::kInfinity;
    for (const AffineSize* a : affine) {
      if (!a->fits[i]) continue;
      least =
          std::min(least, a->fixed_total + a->total[i] +
                              layers * (a->fixed_recompute + a->recompute[i]));
    }
    crude += least * kMilpMilliseconds;
  }
  return std::min(crude, upper_bound * kMilpMilliseconds) * 1.001;
}

LayoutMilp BuildLayoutMilp(const std::vector<int>& layout,
                           const std::vector<const AffineSize*>& affine, int n,
                           int layers, double allreduce, double big) {
  return LayoutMilpBuilder(layout, affine, n, layers, allreduce, big).Build();
}

}  // namespace dcp
