// One step of a job as the planner's state directory recorded it
// (planner/service/step_state_files.h), laid out as a timeline
// (planner/simulate/timeline.h): the plan with the cost model it was priced with,
// and the ranks' measured micro-batches beside the predicted ones. What
// `dcp timeline --state-dir` draws. Protobuf, no gRPC.

#ifndef DCP_PLANNER_SERVICE_RECORDED_TIMELINE_H_
#define DCP_PLANNER_SERVICE_RECORDED_TIMELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/service/step_state_files.h"
#include "planner/simulate/timeline.h"

namespace dcp {

/// A recorded step laid out. Plain value.
struct RecordedTimeline {
  int64_t step = 0;
  Timeline timeline;
  /// Ranks whose reports were recorded, ascending.
  std::vector<int> reported_ranks;
  /// Ranks with a group in the plan and no recorded report, ascending.
  std::vector<int> unreported_ranks;
};

/// Lays out `step`'s plan with its recorded cost model and attaches, per
/// group and micro-batch, the mean over the group's reporting ranks of
/// compute + communication seconds (a group none of whose ranks reported
/// gets no measured bars), and the slowest reporting rank's step seconds as
/// the measured step. FAILED_PRECONDITION, naming the rank, for a report
/// that does not fit the plan (a rank outside the plan's groups, a
/// micro-batch index out of range or given twice, micro-batches missing).
absl::StatusOr<RecordedTimeline> LayOutRecordedStep(
    const RecordedStep& step, const TimelineOptions& options = {});

/// One line about `laid_out`: the plan's shape and whose reports it shows,
/// or that it draws the predicted timeline only.
std::string DescribeRecordedTimeline(const RecordedTimeline& laid_out);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_RECORDED_TIMELINE_H_
