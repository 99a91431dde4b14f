#ifndef DCP_PLANNER_LAYOUT_H_
#define DCP_PLANNER_LAYOUT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cluster_spec.h"

namespace dcp {

/// Lays SP groups of the given sizes out on the topology: a group of up to
/// GPUs-per-node ranks takes an aligned block inside one node (first rank a
/// multiple of its size), a larger one takes whole consecutive nodes.
/// Returns each group's first rank, in the order given. The sizes must sum
/// to the GPU count. FAILED_PRECONDITION if they cannot be laid out.
absl::StatusOr<std::vector<int>> PlaceGroups(absl::Span<const int> group_sizes,
                                             const ClusterSpec& cluster);

/// Every layout of the cluster into SP groups of the given legal sizes
/// (ascending, as LegalSpSizes gives them) that PlaceGroups accepts, each a
/// non-increasing list of sizes summing to the GPU count.
std::vector<std::vector<int>> PlaceableLayouts(absl::Span<const int> sp_sizes,
                                               const ClusterSpec& cluster);

}  // namespace dcp

#endif  // DCP_PLANNER_LAYOUT_H_
