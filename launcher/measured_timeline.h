// One step of a run as every rank measured it, laid out beside its plan's
// predictions: reads the step timing files the workers write next to rank
// 0's run summary (worker/step_timing_files.h), lays the plan out with the
// cost model it was priced with (planner/simulate/timeline.h) and attaches the
// measured micro-batch times, for dcp_local_job's --timeline-step picture
// and its cost-model breakdown (launcher/cost_breakdown.h).

#ifndef DCP_LAUNCHER_MEASURED_TIMELINE_H_
#define DCP_LAUNCHER_MEASURED_TIMELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/simulate/timeline.h"
#include "worker/step_timing_files.h"

namespace dcp {

/// One step: rank 0's plan file and every rank's timing, by rank.
struct MeasuredStep {
  StepPlanFile plan;
  std::vector<RankStepTiming> ranks;
};

/// Checks `step`'s timings against its plan: every rank in the group its
/// timing names, with that group's micro-batch count. FAILED_PRECONDITION
/// naming the rank otherwise.
absl::Status CheckMeasuredStep(const MeasuredStep& step);

/// Reads step `step`'s files from `dir` for ranks 0..world_size-1 and checks
/// them (CheckMeasuredStep). NOT_FOUND when a file is missing (naming it).
absl::StatusOr<MeasuredStep> ReadMeasuredStep(const std::string& dir,
                                              int64_t step, int world_size);

/// Per group of the plan and per micro-batch, what its ranks measured: the
/// mean over the group's ranks of a micro-batch's compute, communication
/// and their sum, and per group the mean of the ranks' idle and step
/// seconds. (Ranks of a group run their micro-batches in lockstep, meeting
/// in every all-to-all, so their times differ little.)
struct GroupMeasurement {
  std::vector<double> compute_seconds;
  std::vector<double> communication_seconds;
  std::vector<double> total_seconds;
  double idle_seconds = 0;
  double step_seconds = 0;
};
std::vector<GroupMeasurement> MeasureGroups(const MeasuredStep& step);

/// The step's plan (checked, see CheckMeasuredStep) laid out with its
/// recorded cost model, one row per
/// group, with MeasureGroups' total_seconds attached as the measured bars
/// and the slowest rank's step seconds as the measured step.
absl::StatusOr<Timeline> MeasuredTimeline(const MeasuredStep& step);

/// Renders MeasuredTimeline(step) as SVG (planner/simulate/timeline_svg.h)
/// titled `title` and writes it to `path` atomically. Errors name the path.
absl::Status WriteMeasuredTimelineSvg(const MeasuredStep& step,
                                      const std::string& title,
                                      const std::string& path);

}  // namespace dcp

#endif  // DCP_LAUNCHER_MEASURED_TIMELINE_H_
