#ifndef DCP_PLANNER_TIMELINE_SVG_H_
#define DCP_PLANNER_TIMELINE_SVG_H_

#include <string>

#include "absl/strings/string_view.h"
#include "planner/simulate/timeline.h"

namespace dcp {

struct TimelineSvgOptions {
  /// Width of the whole picture.
  int width_px = 1200;
  /// Height of one row (a group); rows with measured times split it in two.
  int row_height_px = 20;
  /// Title above the plot; empty: "<strategy> plan: <step> s on <N> ranks".
  std::string title;
};

/// One self-contained SVG document (no scripts, fonts or links) drawing the
/// timeline: one row per TimelineRow, time on the x axis, each micro-batch
/// a bar split into its parts (forward, recompute, backward, all-to-all),
/// the exposed all-reduce at the end, waiting as a grey gap, each group
/// outlined and labelled with its SP size, accumulation count and ranks,
/// the lower bound as a dashed line, and measured micro-batch times (when
/// attached) in the lower half of their row.
///
/// For tools and tests, elements carry data attributes: the root
/// `data-num-ranks`, `data-step-seconds`; each row `<g class="row">`
/// `data-ranks` (comma-separated), `data-sp-size`, `data-groups`,
/// `data-micro-batches`, `data-busy-seconds`; each bar `<rect class="bar">`
/// `data-part` (TimelinePartName), `data-start-seconds`,
/// `data-duration-seconds`, `data-micro-batch`; measured bars
/// `<rect class="measured">` likewise.
std::string RenderTimelineSvg(const Timeline& timeline,
                              const TimelineSvgOptions& options = {});

/// `text` with &, <, >, " and ' escaped for XML text and attributes.
std::string XmlEscape(absl::string_view text);

/// "7.28 s", "0.0123 s", "412 ms" style seconds for labels.
std::string FormatSecondsLabel(double seconds);

}  // namespace dcp

#endif  // DCP_PLANNER_TIMELINE_SVG_H_
