#include "launcher/measured_timeline.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "planner/simulate/timeline_svg.h"

namespace dcp {

absl::Status CheckMeasuredStep(const MeasuredStep& measured) {
  const std::vector<GroupPlan>& groups = measured.plan.plan.groups;
  const int64_t step = measured.plan.step;
  for (const RankStepTiming& timing : measured.ranks) {
    const int rank = timing.rank;
    const int g = timing.group_index;
    if (g < 0 || static_cast<size_t>(g) >= groups.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, " of step ", step, " ran group ", g,
          " but the step's plan has ", groups.size(), " groups"));
    }
    if (std::find(groups[g].ranks.begin(), groups[g].ranks.end(), rank) ==
        groups[g].ranks.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank, " of step ", step, " ran group ", g,
                       " but the plan does not place it there"));
    }
    if (timing.micro_batches.size() != groups[g].micro_batches.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, " of step ", step, " measured ",
          timing.micro_batches.size(), " micro-batches but group ", g,
          " of the plan has ", groups[g].micro_batches.size()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<MeasuredStep> ReadMeasuredStep(const std::string& dir,
                                              int64_t step, int world_size) {
  MeasuredStep measured;
  absl::StatusOr<StepPlanFile> plan = ReadStepPlanFile(dir, step);
  if (!plan.ok()) return plan.status();
  measured.plan = *std::move(plan);
  for (int rank = 0; rank < world_size; ++rank) {
    absl::StatusOr<RankStepTiming> timing =
        ReadRankStepTiming(dir, step, rank);
    if (!timing.ok()) return timing.status();
    measured.ranks.push_back(*std::move(timing));
  }
  if (absl::Status checked = CheckMeasuredStep(measured); !checked.ok()) {
    return checked;
  }
  return measured;
}

std::vector<GroupMeasurement> MeasureGroups(const MeasuredStep& step) {
  const std::vector<GroupPlan>& groups = step.plan.plan.groups;
  std::vector<GroupMeasurement> out(groups.size());
  std::vector<int> members(groups.size(), 0);
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t count = groups[g].micro_batches.size();
    out[g].compute_seconds.assign(count, 0);
    out[g].communication_seconds.assign(count, 0);
    out[g].total_seconds.assign(count, 0);
  }
  for (const RankStepTiming& rank : step.ranks) {
    GroupMeasurement& group = out[rank.group_index];
    ++members[rank.group_index];
    for (size_t m = 0; m < rank.micro_batches.size(); ++m) {
      group.compute_seconds[m] += rank.micro_batches[m].compute_seconds;
      group.communication_seconds[m] +=
          rank.micro_batches[m].communication_seconds;
    }
    group.idle_seconds += rank.IdleSeconds();
    group.step_seconds += rank.step_seconds;
  }
  for (size_t g = 0; g < out.size(); ++g) {
    if (members[g] == 0) continue;
    const double n = members[g];
    for (size_t m = 0; m < out[g].compute_seconds.size(); ++m) {
      out[g].compute_seconds[m] /= n;
      out[g].communication_seconds[m] /= n;
      out[g].total_seconds[m] =
          out[g].compute_seconds[m] + out[g].communication_seconds[m];
    }
    out[g].idle_seconds /= n;
    out[g].step_seconds /= n;
  }
  return out;
}

absl::StatusOr<Timeline> MeasuredTimeline(const MeasuredStep& step) {
  if (absl::Status checked = CheckMeasuredStep(step); !checked.ok()) {
    return checked;
  }
  absl::StatusOr<CostModel> cost_model = step.plan.MakeCostModel();
  if (!cost_model.ok()) return cost_model.status();
  TimelineOptions options;
  options.max_rows = std::max<int>(1, step.plan.plan.groups.size());
  absl::StatusOr<Timeline> timeline = BuildTimeline(
      *cost_model, step.plan.lengths_tokens, step.plan.plan, options);
  if (!timeline.ok()) return timeline.status();
  std::vector<std::vector<double>> per_group;
  for (const GroupMeasurement& group : MeasureGroups(step)) {
    per_group.push_back(group.total_seconds);
  }
  double slowest = 0;
  for (const RankStepTiming& rank : step.ranks) {
    slowest = std::max(slowest, rank.step_seconds);
  }
  if (absl::Status attached =
          AttachMeasuredSeconds(per_group, slowest, *timeline);
      !attached.ok()) {
    return attached;
  }
  return timeline;
}

absl::Status WriteMeasuredTimelineSvg(const MeasuredStep& step,
                                      const std::string& title,
                                      const std::string& path) {
  absl::StatusOr<Timeline> timeline = MeasuredTimeline(step);
  if (!timeline.ok()) return timeline.status();
  TimelineSvgOptions options;
  options.title = title;
  return WriteFileAtomically(path, RenderTimelineSvg(*timeline, options));
}

}  // namespace dcp
