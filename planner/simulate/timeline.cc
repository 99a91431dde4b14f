#include "planner/simulate/timeline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cost_model/micro_batch_shape.h"
#include "planner/plan/plan_table.h"

namespace dcp {
namespace {

// Rank numbers a label lists before it elides the rest.
constexpr int kLabelRanks = 3;

// "rank 3", "ranks 0-7", "ranks 0,5,9", or past kLabelRanks scattered
// ranks "ranks 0,5,9,... (32)".
std::string RanksLabel(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no ranks";
  const char* prefix = ranks.size() == 1 ? "rank " : "ranks ";
  const bool contiguous =
      ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
  if (contiguous || ranks.size() <= static_cast<size_t>(kLabelRanks)) {
    return absl::StrCat(prefix, DescribeRankList(ranks));
  }
  const std::vector<int> shown(ranks.begin(), ranks.begin() + kLabelRanks);
  return absl::StrCat(prefix, DescribeRankList(shown), ",... (", ranks.size(),
                      ")");
}

// One group laid out from t = 0: its micro-batches and their parts.
TimelineRow LayOutGroup(const CostModel& cost_model,
                        absl::Span<const int64_t> lengths_tokens,
                        const GroupPlan& group, int group_index) {
  TimelineRow row;
  row.ranks = group.ranks;
  row.sp_size = group.sp_size();
  row.group_index = group_index;
  row.num_micro_batches = static_cast<int>(group.micro_batches.size());
  const int layers = cost_model.model().num_layers;
  double t = 0;
  for (size_t m = 0; m < group.micro_batches.size(); ++m) {
    const MicroBatchPlan& micro_batch = group.micro_batches[m];
    const MicroBatchShape shape = ShapeOfSequences(
        lengths_tokens, micro_batch.sequence_indices, group.sp_size());
    const int k = micro_batch.checkpointed_layers;
    const MicroBatchCost cost = cost_model.MicroBatch(shape, k);
    // The cost model charges one layer's all-to-alls (a) per layer forward,
    // per layer backward and per recomputed layer: comm = (2L + k) a.
    const double per_layer_all_to_all =
        cost.communication_seconds > 0
            ? cost.communication_seconds / (2 * layers + k)
            : 0;
    const double parts[] = {
        cost.forward_seconds - layers * per_layer_all_to_all,
        cost.recompute_seconds - k * per_layer_all_to_all,
        cost.backward_seconds - cost.recompute_seconds -
            layers * per_layer_all_to_all,
        cost.communication_seconds};
    const TimelinePart kinds[] = {
        TimelinePart::kForward, TimelinePart::kRecompute,
        TimelinePart::kBackward, TimelinePart::kAllToAll};
    TimelineMicroBatch outline;
    outline.start_seconds = t;
    outline.num_sequences = shape.num_sequences;
    outline.tokens = shape.sum_lengths;
    outline.checkpointed_layers = k;
    for (int p = 0; p < 4; ++p) {
      const double seconds = std::max(0.0, parts[p]);
      if (seconds <= 0) continue;
      row.bars.push_back(
          TimelineBar{t, seconds, kinds[p], static_cast<int>(m)});
      t += seconds;
    }
    outline.duration_seconds = t - outline.start_seconds;
    row.micro_batches.push_back(outline);
  }
  row.busy_seconds = t;
  row.min_busy_seconds = t;
  return row;
}

// Past `max_rows` groups: per SP size, groups sorted by busy time are cut
// into runs of alike ones, each drawn as its slowest member. Every SP size
// keeps at least one row; the rest are shared out by group count.
std::vector<TimelineRow> Aggregate(std::vector<TimelineRow> rows,
                                   int max_rows) {
  std::map<int, std::vector<TimelineRow>, std::greater<int>> by_size;
  for (TimelineRow& row : rows) by_size[row.sp_size].push_back(std::move(row));
  const int total = static_cast<int>(rows.size());
  const int classes = static_cast<int>(by_size.size());
  const int spare = std::max(0, max_rows - classes);
  std::vector<TimelineRow> out;
  for (auto& [sp_size, members] : by_size) {
    std::sort(members.begin(), members.end(),
              [](const TimelineRow& a, const TimelineRow& b) {
                if (a.busy_seconds != b.busy_seconds) {
                  return a.busy_seconds > b.busy_seconds;
                }
                return a.group_index < b.group_index;
              });
    const int count = static_cast<int>(members.size());
    const int row_count =
        std::min(count, 1 + static_cast<int>(static_cast<int64_t>(spare) *
                                             count / std::max(1, total)));
    for (int r = 0; r < row_count; ++r) {
      const int begin =
          static_cast<int>(static_cast<int64_t>(r) * count / row_count);
      const int end =
          static_cast<int>(static_cast<int64_t>(r + 1) * count / row_count);
      TimelineRow merged = members[begin];  // the slowest of the run
      merged.num_groups = end - begin;
      merged.min_busy_seconds = members[end - 1].busy_seconds;
      for (int i = begin + 1; i < end; ++i) {
        merged.ranks.insert(merged.ranks.end(), members[i].ranks.begin(),
                            members[i].ranks.end());
      }
      std::sort(merged.ranks.begin(), merged.ranks.end());
      out.push_back(std::move(merged));
    }
  }
  return out;
}

}  // namespace

const char* TimelinePartName(TimelinePart part) {
  switch (part) {
    case TimelinePart::kForward:
      return "forward";
    case TimelinePart::kRecompute:
      return "recompute";
    case TimelinePart::kBackward:
      return "backward";
    case TimelinePart::kAllToAll:
      return "all-to-all";
    case TimelinePart::kExposedAllReduce:
      return "all-reduce";
    case TimelinePart::kOptimizerStep:
      return "optimizer step";
  }
  return "unknown";
}

absl::StatusOr<Timeline> BuildTimeline(const CostModel& cost_model,
                                       absl::Span<const int64_t> lengths_tokens,
                                       const Plan& plan,
                                       const TimelineOptions& options) {
  if (options.max_rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "timeline max_rows = ", options.max_rows, "; draw at least 1 row"));
  }
  if (plan.groups.empty()) {
    return absl::InvalidArgumentError(
        "the plan has no groups; there is nothing to draw");
  }
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const GroupPlan& group = plan.groups[g];
    for (size_t m = 0; m < group.micro_batches.size(); ++m) {
      for (int index : group.micro_batches[m].sequence_indices) {
        if (index < 0 || static_cast<size_t>(index) >= lengths_tokens.size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "groups[", g, "].micro_batches[", m, "] names sequence ", index,
              " but the batch has ", lengths_tokens.size(),
              " sequences; give the lengths file the plan was made for"));
        }
      }
    }
  }
  Plan predicted = plan;
  PredictPlan(cost_model, lengths_tokens, predicted);

  Timeline timeline;
  timeline.strategy = plan.strategy;
  timeline.step_seconds = predicted.predicted_step_seconds;
  timeline.slowest_group_seconds = predicted.slowest_group_seconds;
  timeline.exposed_allreduce_seconds = predicted.exposed_allreduce_seconds;
  timeline.lower_bound_seconds = plan.lower_bound_seconds;
  timeline.idle_fraction = MeanIdleFraction(predicted);
  std::vector<TimelineRow> rows;
  rows.reserve(predicted.groups.size());
  for (size_t g = 0; g < predicted.groups.size(); ++g) {
    rows.push_back(LayOutGroup(cost_model, lengths_tokens, predicted.groups[g],
                               static_cast<int>(g)));
    timeline.num_ranks += predicted.groups[g].sp_size();
  }
  if (static_cast<int>(rows.size()) > options.max_rows) {
    rows = Aggregate(std::move(rows), options.max_rows);
  }
  const double optimizer_step = cost_model.OptimizerStepSeconds();
  for (TimelineRow& row : rows) {
    if (timeline.exposed_allreduce_seconds > 0) {
      row.bars.push_back(TimelineBar{timeline.slowest_group_seconds,
                                     timeline.exposed_allreduce_seconds,
                                     TimelinePart::kExposedAllReduce, -1});
    }
    if (optimizer_step > 0) {
      row.bars.push_back(TimelineBar{
          timeline.slowest_group_seconds + timeline.exposed_allreduce_seconds,
          optimizer_step, TimelinePart::kOptimizerStep, -1});
    }
    row.ranks_label = RanksLabel(row.ranks);
  }
  timeline.rows = std::move(rows);
  timeline.num_groups_in_plan = static_cast<int>(predicted.groups.size());
  return timeline;
}

absl::Status AttachMeasuredSeconds(
    const std::vector<std::vector<double>>& per_group,
    std::optional<double> measured_step_seconds, Timeline& timeline) {
  if (per_group.size() != static_cast<size_t>(timeline.num_groups_in_plan)) {
    return absl::InvalidArgumentError(
        absl::StrCat("measured times cover ", per_group.size(),
                     " groups but the plan has ", timeline.num_groups_in_plan));
  }
  for (size_t g = 0; g < per_group.size(); ++g) {
    for (double seconds : per_group[g]) {
      if (!std::isfinite(seconds) || seconds < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("group ", g, " has a measured micro-batch time of ",
                         seconds, "; times must be finite and >= 0"));
      }
    }
  }
  if (measured_step_seconds.has_value() &&
      (!std::isfinite(*measured_step_seconds) || *measured_step_seconds < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("measured step time ", *measured_step_seconds,
                     " s; it must be finite and >= 0"));
  }
  for (const TimelineRow& row : timeline.rows) {
    const std::vector<double>& times = per_group[row.group_index];
    if (!times.empty() &&
        times.size() != static_cast<size_t>(row.num_micro_batches)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", row.group_index, " ran ", times.size(),
          " measured micro-batches but its plan has ", row.num_micro_batches));
    }
  }
  for (TimelineRow& row : timeline.rows) {
    row.measured_micro_batch_seconds = per_group[row.group_index];
  }
  timeline.measured_step_seconds = measured_step_seconds;
  return absl::OkStatus();
}

}  // namespace dcp
