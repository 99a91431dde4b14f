#include "planner/service/recorded_timeline.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cost_model/cost_model.h"
#include "planner/client/proto_convert.h"
#include "planner/plan/plan.h"

namespace dcp {
namespace {

/// "3 ranks (1, 5, 7)" with at most a few numbers.
std::string RanksList(const std::vector<int>& ranks) {
  constexpr size_t kShown = 8;
  std::vector<int> shown(ranks.begin(),
                         ranks.begin() + std::min(ranks.size(), kShown));
  return absl::StrCat(ranks.size(), ranks.size() == 1 ? " rank (" : " ranks (",
                      absl::StrJoin(shown, ", "),
                      ranks.size() > kShown ? ", ...)" : ")");
}

}  // namespace

absl::StatusOr<RecordedTimeline> LayOutRecordedStep(
    const RecordedStep& step, const TimelineOptions& options) {
  const v1::StepPlanRecord& record = step.plan;
  absl::StatusOr<CostModel> cost_model = CostModel::Create(
      ModelSpecFromProto(record.model()), ClusterSpecFromProto(record.cluster()),
      CostParamsFromProto(record.params()));
  if (!cost_model.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", record.step(), "'s recorded cost model: ",
                     cost_model.status().message()));
  }
  if (record.plan().phases_size() > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", record.step(), "'s plan re-groups the ranks in ",
        record.plan().phases_size(),
        " phases; the recorded timeline draws plans of one layout"));
  }
  const Plan plan = PlanFromProto(record.plan());
  const std::vector<int64_t> lengths(record.lengths_tokens().begin(),
                                     record.lengths_tokens().end());
  RecordedTimeline out;
  out.step = record.step();
  absl::StatusOr<Timeline> timeline =
      BuildTimeline(*cost_model, lengths, plan, options);
  if (!timeline.ok()) return timeline.status();
  out.timeline = *std::move(timeline);

  // Group of each rank, and per group and micro-batch the reports' sums.
  std::vector<int> group_of_rank(cost_model->cluster().NumGpus(), -1);
  std::vector<std::vector<double>> sums(plan.groups.size());
  std::vector<int> reporting(plan.groups.size(), 0);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    for (int rank : plan.groups[g].ranks) {
      if (rank >= 0 && rank < static_cast<int>(group_of_rank.size())) {
        group_of_rank[rank] = static_cast<int>(g);
      }
    }
    sums[g].assign(plan.groups[g].micro_batches.size(), 0);
  }
  std::optional<double> slowest;
  std::vector<bool> reported(group_of_rank.size(), false);
  if (step.reports.has_value()) {
    for (const v1::RankStepReport& report : step.reports->ranks()) {
      const int rank = report.rank();
      const int g = rank >= 0 && rank < static_cast<int>(group_of_rank.size())
                        ? group_of_rank[rank]
                        : -1;
      if (g < 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "step ", out.step, "'s reports name rank ", rank,
            ", which has no group in the step's plan"));
      }
      if (reported[rank]) {
        return absl::FailedPreconditionError(absl::StrCat(
            "step ", out.step, "'s reports hold rank ", rank, " twice"));
      }
      reported[rank] = true;
      std::vector<bool> seen(sums[g].size(), false);
      for (const v1::MeasuredMicroBatch& micro : report.micro_batches()) {
        const int m = micro.micro_batch_index();
        if (m < 0 || m >= static_cast<int>(seen.size())) {
          return absl::FailedPreconditionError(
              absl::StrCat("step ", out.step, ": rank ", rank,
                           " reported micro-batch ", m, " but its group runs ",
                           seen.size(), " (indices 0..", seen.size() - 1, ")"));
        }
        if (seen[m]) {
          return absl::FailedPreconditionError(
              absl::StrCat("step ", out.step, ": rank ", rank,
                           " reported micro-batch ", m, " twice"));
        }
        seen[m] = true;
        sums[g][m] += micro.compute_seconds() + micro.communication_seconds();
      }
      if (std::count(seen.begin(), seen.end(), false) > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "step ", out.step, ": rank ", rank, " reported ",
            report.micro_batches_size(), " micro-batches but its group runs ",
            seen.size()));
      }
      ++reporting[g];
      slowest = std::max(slowest.value_or(0), report.step_seconds());
      out.reported_ranks.push_back(rank);
    }
  }
  for (size_t rank = 0; rank < group_of_rank.size(); ++rank) {
    if (group_of_rank[rank] >= 0 && !reported[rank]) {
      out.unreported_ranks.push_back(static_cast<int>(rank));
    }
  }
  std::sort(out.reported_ranks.begin(), out.reported_ranks.end());
  if (out.reported_ranks.empty()) return out;

  std::vector<std::vector<double>> per_group(plan.groups.size());
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    if (reporting[g] == 0) continue;  // no measured bars
    for (double sum : sums[g]) per_group[g].push_back(sum / reporting[g]);
  }
  if (absl::Status attached =
          AttachMeasuredSeconds(per_group, slowest, out.timeline);
      !attached.ok()) {
    return attached;
  }
  return out;
}

std::string DescribeRecordedTimeline(const RecordedTimeline& laid_out) {
  const Timeline& timeline = laid_out.timeline;
  std::string line = absl::StrFormat(
      "step %d: %s plan of %d groups on %d ranks, predicted %.4g s", laid_out.step,
      timeline.strategy, timeline.num_groups_in_plan, timeline.num_ranks,
      timeline.step_seconds);
  if (laid_out.reported_ranks.empty()) {
    return absl::StrCat(line,
                        "; no rank's measured report is recorded for this "
                        "step, so the timeline shows the prediction only");
  }
  absl::StrAppendFormat(&line, ", measured %.4g s (slowest of %d reporting ranks)",
                        timeline.measured_step_seconds.value_or(0),
                        laid_out.reported_ranks.size());
  if (!laid_out.unreported_ranks.empty()) {
    absl::StrAppend(&line, "; no report from ",
                    RanksList(laid_out.unreported_ranks),
                    ", whose groups' measured bars are their other ranks' "
                    "mean or absent");
  }
  return line;
}

}  // namespace dcp
