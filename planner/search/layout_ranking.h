// Layouts of SP groups ranked by the batch's additive estimates, and the
// greedy assignment that prices them.

#ifndef DCP_PLANNER_SEARCH_LAYOUT_RANKING_H_
#define DCP_PLANNER_SEARCH_LAYOUT_RANKING_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/cluster_spec.h"
#include "planner/search/assignment.h"
#include "planner/search/batch_table.h"

namespace dcp {

/// Greedy assignment of the table's items, biggest first, each to the group
/// (of the sizes it fits) where it would finish first, to the layout
/// `counts` (groups per size index of `sizes`). Without `keep_sequences`
/// only the estimated makespan is filled (cheaper, for ranking layouts).
/// nullopt when some item fits no group of the layout. Deterministic.
std::optional<Assignment> AssignGreedily(const BatchTable& table,
                                         const std::vector<int>& sizes,
                                         const std::vector<int>& counts,
                                         bool keep_sequences = true);

/// The layouts (groups per size index) worth pricing exactly, best
/// estimated makespan first, then every homogeneous layout that fits the
/// batch. Candidates come from step-time targets at multiples of the lower
/// bound (each size's work in whole groups), and from every homogeneous
/// layout; each is hill-climbed by merging groups of one size into a larger
/// one or splitting one, judged by AssignGreedily's makespan, within a
/// budget that shrinks as batches grow. Layouts PlaceGroups refuses on
/// `cluster` are left out. `progress` (may be empty) gets one line.
/// Deterministic.
std::vector<std::vector<int>> RankLayouts(
    const BatchTable& table, const std::vector<int>& sizes,
    const ClusterSpec& cluster,
    const std::function<void(std::string)>& progress);

}  // namespace dcp

#endif  // DCP_PLANNER_SEARCH_LAYOUT_RANKING_H_
