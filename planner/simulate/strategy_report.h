#ifndef DCP_PLANNER_STRATEGY_REPORT_H_
#define DCP_PLANNER_STRATEGY_REPORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cost_model/cost_model.h"
#include "planner/simulate/simulator.h"

namespace dcp {

/// What the report says about where it came from.
struct StrategyReportOptions {
  /// The command that produced the simulation, shown verbatim.
  std::string command_line;
  /// Rows drawn per timeline at most (TimelineOptions::max_rows).
  int max_timeline_rows = 128;
};

/// One self-contained HTML page (inline CSS and SVG; no scripts, fonts,
/// images or links to fetch) about a simulation made with
/// SimulationOptions::keep_plans: the workload's length histogram (sequences
/// and tokens per power-of-two length bin), a table of every strategy (mean
/// step, speedup against the best static strategy simulated and against
/// bucket, idle fraction, peak memory, gap to the lower bound), each
/// strategy's step-time distribution over the batches, and the timeline
/// (RenderTimelineSvg) of each strategy's median batch.
///
/// "Best static" is the `best-static` strategy when it was simulated (the
/// best SP size searched), else the faster, by mean step time, of `bucket`
/// and `packed` (at the SP size they were run with); the page says which. INVALID_ARGUMENT when the report holds no
/// plans (keep_plans was off) or its plans and batches do not line up.
absl::StatusOr<std::string> RenderStrategyReportHtml(
    const SimulationReport& report, const CostModel& cost_model,
    const StrategyReportOptions& options = {});

/// Writes RenderStrategyReportHtml() to `directory`/index.html, creating the
/// directory if needed; the file is written whole or not at all. Errors
/// name the path and the system's reason.
absl::Status WriteStrategyReport(const std::string& directory,
                                 const SimulationReport& report,
                                 const CostModel& cost_model,
                                 const StrategyReportOptions& options = {});

}  // namespace dcp

#endif  // DCP_PLANNER_STRATEGY_REPORT_H_
