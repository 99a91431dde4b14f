// dcp_local_job's measured outputs of one run (dcp or bucket), from the step
// timing files its workers wrote (worker/step_timing_files.h): the cost-model
// breakdown (launcher/cost_breakdown.h) printed after the summary, and on
// request the predicted-vs-measured timeline of one step as SVG
// (launcher/measured_timeline.h).

#ifndef DCP_LAUNCHER_TIMELINE_OUTPUT_H_
#define DCP_LAUNCHER_TIMELINE_OUTPUT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "worker/run_summary.h"

namespace dcp {

struct MeasuredRunOutput {
  /// "dcp" or "bucket": names the run in the lines and the picture.
  std::string label;
  /// The run's step timing directory (StepTimingDir of its summary file).
  std::string dir;
  int world_size = 0;
  /// The step to draw (-1: none) and the SVG file to write it to.
  int64_t timeline_step = -1;
  std::string timeline_path;
};

/// Prints the breakdown of `summary`'s steps (without the run's first step
/// when it ran more than one: it also builds the SP groups' communicators)
/// with `print`, one line at a time, then writes the timeline. A breakdown
/// that cannot be made is a printed warning, and so is a timeline step
/// that ran a plan of phases (drawn for plans of one layout only); a
/// timeline that cannot be drawn otherwise is the error returned (naming
/// the step and the file).
absl::Status ReportMeasuredRun(const MeasuredRunOutput& output,
                               const RunSummary& summary,
                               const std::function<void(const std::string&)>&
                                   print);

/// `path` with ".<label>" before its extension ("t.svg" -> "t.bucket.svg").
std::string LabelledPath(const std::string& path, const std::string& label);

}  // namespace dcp

#endif  // DCP_LAUNCHER_TIMELINE_OUTPUT_H_
