#include "launcher/cost_breakdown.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/percentile.h"

namespace dcp {
namespace {

/// Predicted and measured values of one term, with the base of each error.
struct Samples {
  std::vector<double> errors;
  std::vector<double> ratios;

  /// Left out when `base` is not > 0; the ratio only when `measured` is.
  void Add(double predicted, double measured, double base) {
    if (!(base > 0)) return;
    errors.push_back(std::abs(predicted - measured) / base);
    if (measured > 0) ratios.push_back(predicted / measured);
  }

  TermError Summary() const {
    TermError term;
    term.samples = static_cast<int>(errors.size());
    term.median = Percentile(errors, 0.5);
    term.p90 = Percentile(errors, 0.9);
    term.median_ratio = Percentile(ratios, 0.5);
    return term;
  }
};

std::string TermLine(const char* name, const char* unit,
                     const TermError& term) {
  if (term.samples == 0) {
    return absl::StrFormat("  %-11s no samples", name);
  }
  return absl::StrFormat(
      "  %-11s median %5.1f%%  p90 %5.1f%%  predicted/measured %.2f  (%d %s)",
      name, 100 * term.median, 100 * term.p90, term.median_ratio, term.samples,
      unit);
}

}  // namespace

absl::StatusOr<CostBreakdown> BreakdownOf(
    const std::vector<MeasuredStep>& steps) {
  Samples compute;
  Samples communication;
  Samples idle;
  for (const MeasuredStep& step : steps) {
    absl::StatusOr<Timeline> timeline = MeasuredTimeline(step);
    if (!timeline.ok()) return timeline.status();
    const std::vector<GroupMeasurement> measured = MeasureGroups(step);
    for (const TimelineRow& row : timeline->rows) {
      const GroupMeasurement& group = measured[row.group_index];
      std::vector<double> predicted_compute(row.num_micro_batches, 0);
      std::vector<double> predicted_communication(row.num_micro_batches, 0);
      for (const TimelineBar& bar : row.bars) {
        if (bar.micro_batch < 0) continue;
        if (bar.part == TimelinePart::kAllToAll) {
          predicted_communication[bar.micro_batch] += bar.duration_seconds;
        } else {
          predicted_compute[bar.micro_batch] += bar.duration_seconds;
        }
      }
      for (int m = 0; m < row.num_micro_batches; ++m) {
        compute.Add(predicted_compute[m], group.compute_seconds[m],
                    group.compute_seconds[m]);
        communication.Add(predicted_communication[m],
                          group.communication_seconds[m],
                          group.communication_seconds[m]);
      }
      idle.Add(timeline->step_seconds - row.busy_seconds, group.idle_seconds,
               group.step_seconds);
    }
  }
  CostBreakdown breakdown;
  breakdown.steps = static_cast<int>(steps.size());
  breakdown.compute = compute.Summary();
  breakdown.communication = communication.Summary();
  breakdown.idle = idle.Summary();
  return breakdown;
}

std::vector<std::string> FormatBreakdown(const std::string& label,
                                         const CostBreakdown& breakdown) {
  return {
      absl::StrFormat("%s cost-model breakdown over %d steps, |predicted - "
                      "measured| / measured:",
                      label, breakdown.steps),
      TermLine("compute", "micro-batches", breakdown.compute),
      TermLine("all-to-all", "micro-batches", breakdown.communication),
      TermLine("idle", "group-steps; error of the step time",
               breakdown.idle),
  };
}

}  // namespace dcp
