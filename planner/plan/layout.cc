#include "planner/plan/layout.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dcp {

namespace {

// Whether `size` ranks from `start` are all free.
bool Free(const std::vector<char>& used, int start, int size) {
  return std::none_of(used.begin() + start, used.begin() + start + size,
                      [](char u) { return u != 0; });
}

// Depth-first search over aligned positions for groups in `order` (largest
// first), for sizes that do not divide each other. Groups of equal size take
// increasing positions (their order does not matter). Gives up after
// `budget` placements.
bool Search(absl::Span<const int> group_sizes, const std::vector<int>& order,
            size_t next, int per_node, std::vector<char>& used,
            std::vector<int>& first_rank, int64_t& budget) {
  if (next == order.size()) return true;
  if (--budget < 0) return false;
  const int g = order[next];
  const int size = group_sizes[g];
  const int step = size <= per_node ? size : per_node;
  int start = 0;
  if (next > 0 && group_sizes[order[next - 1]] == size) {
    start = first_rank[order[next - 1]] + step;
  }
  const int world = static_cast<int>(used.size());
  for (; start + size <= world; start += step) {
    if (size <= per_node && start / per_node != (start + size - 1) / per_node) {
      continue;
    }
    if (!Free(used, start, size)) continue;
    std::fill(used.begin() + start, used.begin() + start + size, 1);
    first_rank[g] = start;
    if (Search(group_sizes, order, next + 1, per_node, used, first_rank,
               budget)) {
      return true;
    }
    std::fill(used.begin() + start, used.begin() + start + size, 0);
  }
  first_rank[g] = -1;
  return false;
}

}  // namespace

absl::StatusOr<std::vector<int>> PlaceGroups(absl::Span<const int> group_sizes,
                                             const ClusterSpec& cluster) {
  const int world = cluster.NumGpus();
  const int per_node = cluster.gpus_per_node;
  const long total =
      std::accumulate(group_sizes.begin(), group_sizes.end(), 0L);
  if (total != world) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group sizes sum to ", total, " GPUs but the cluster has ", world));
  }
  for (int size : group_sizes) {
    if (size <= 0 || (size <= per_node && per_node % size != 0) ||
        (size > per_node && size % per_node != 0)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "an SP group of ", size, " GPUs can neither stay inside a node of ",
          per_node, " nor take whole nodes"));
    }
  }
  // Largest first. When sizes divide each other every block lands on the
  // first free aligned rank, so a linear scan suffices; otherwise fall back
  // to a bounded search.
  std::vector<int> order(group_sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return group_sizes[a] > group_sizes[b];
  });
  std::vector<char> used(world, 0);
  std::vector<int> first_rank(group_sizes.size(), -1);
  int first_free = 0;
  bool greedy_ok = true;
  for (int g : order) {
    const int size = group_sizes[g];
    const int step = size <= per_node ? size : per_node;
    while (first_free < world && used[first_free]) ++first_free;
    int start = (first_free / step) * step;
    for (; start + size <= world; start += step) {
      if (Free(used, start, size)) break;
    }
    if (start + size > world) {
      greedy_ok = false;
      break;
    }
    std::fill(used.begin() + start, used.begin() + start + size, 1);
    first_rank[g] = start;
  }
  if (greedy_ok) return first_rank;

  std::fill(used.begin(), used.end(), 0);
  std::fill(first_rank.begin(), first_rank.end(), -1);
  int64_t budget = 200000;
  if (Search(group_sizes, order, 0, per_node, used, first_rank, budget)) {
    return first_rank;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "found no layout of SP groups of sizes ", absl::StrJoin(group_sizes, ","),
      " in aligned blocks on ", cluster.num_nodes, " nodes of ", per_node,
      " GPUs", budget < 0 ? " (search budget exhausted)" : ""));
}

namespace {

// Non-increasing lists of the sizes summing to `left`, none above `largest`.
void EnumerateLayouts(absl::Span<const int> sizes, int left, int largest,
                      std::vector<int>& current,
                      std::vector<std::vector<int>>& out) {
  if (left == 0) {
    out.push_back(current);
    return;
  }
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    if (*it > largest || *it > left) continue;
    current.push_back(*it);
    EnumerateLayouts(sizes, left - *it, *it, current, out);
    current.pop_back();
  }
}

}  // namespace

std::vector<std::vector<int>> PlaceableLayouts(absl::Span<const int> sp_sizes,
                                               const ClusterSpec& cluster) {
  std::vector<std::vector<int>> all;
  std::vector<int> current;
  if (sp_sizes.empty()) return all;
  EnumerateLayouts(sp_sizes, cluster.NumGpus(), sp_sizes.back(), current, all);
  std::vector<std::vector<int>> placeable;
  for (std::vector<int>& layout : all) {
    if (PlaceGroups(layout, cluster).ok())
      placeable.push_back(std::move(layout));
  }
  return placeable;
}

}  // namespace dcp
