#include "planner/layout.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace dcp {

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
  // Largest first, so that with sizes dividing each other every block lands
  // on the first free rank and the scan below is linear.
  std::vector<int> order(group_sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return group_sizes[a] > group_sizes[b];
  });
  std::vector<char> used(world, 0);
  std::vector<int> first_rank(group_sizes.size(), -1);
  int first_free = 0;
  for (int g : order) {
    const int size = group_sizes[g];
    const int step = size <= per_node ? size : per_node;
    if (size <= 0 || (size <= per_node && per_node % size != 0) ||
        (size > per_node && size % per_node != 0)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "an SP group of ", size, " GPUs can neither stay inside a node of ",
          per_node, " nor take whole nodes"));
    }
    while (first_free < world && used[first_free]) ++first_free;
    int start = (first_free / step) * step;
    for (; start + size <= world; start += step) {
      if (std::none_of(used.begin() + start, used.begin() + start + size,
                       [](char u) { return u != 0; })) {
        break;
      }
    }
    if (start + size > world) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no aligned block of ", size, " free GPUs is left for an SP group"));
    }
    std::fill(used.begin() + start, used.begin() + start + size, 1);
    first_rank[g] = start;
  }
  return first_rank;
}

}  // namespace dcp
