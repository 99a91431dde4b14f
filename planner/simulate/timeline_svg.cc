#include "planner/simulate/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dcp {
namespace {

constexpr int kLabelWidthPx = 300;
constexpr int kRightMarginPx = 24;
constexpr int kHeaderPx = 64;
constexpr int kAxisPx = 36;

const char* PartColor(TimelinePart part) {
  switch (part) {
    case TimelinePart::kForward:
      return "#4e79a7";
    case TimelinePart::kRecompute:
      return "#f28e2b";
    case TimelinePart::kBackward:
      return "#59a14f";
    case TimelinePart::kAllToAll:
      return "#e15759";
    case TimelinePart::kExposedAllReduce:
      return "#b07aa1";
    case TimelinePart::kOptimizerStep:
      return "#9c755f";
  }
  return "#000000";
}

constexpr char kMeasuredColor[] = "#76b7b2";
constexpr char kIdleColor[] = "#e6e6e6";

// A round tick spacing giving about `target` ticks over [0, span].
double TickStep(double span, int target) {
  if (span <= 0) return 1;
  const double raw = span / target;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= factor * power) return factor * power;
  }
  return 10 * power;
}

std::string Num(double value) { return absl::StrFormat("%.6g", value); }

// Pixel coordinates, rounded to 0.01 px.
std::string Px(double value) { return absl::StrFormat("%.2f", value); }

class SvgWriter {
 public:
  SvgWriter(const Timeline& timeline, const TimelineSvgOptions& options)
      : timeline_(timeline), options_(options) {
    double extent =
        std::max(timeline.step_seconds, timeline.lower_bound_seconds);
    if (timeline.measured_step_seconds.has_value()) {
      extent = std::max(extent, *timeline.measured_step_seconds);
    }
    for (const TimelineRow& row : timeline.rows) {
      double measured = 0;
      for (double seconds : row.measured_micro_batch_seconds)
        measured += seconds;
      extent = std::max(extent, measured);
    }
    extent_seconds_ = extent > 0 ? extent * 1.02 : 1;
    plot_width_px_ =
        std::max(100, options.width_px - kLabelWidthPx - kRightMarginPx);
    height_px_ =
        kHeaderPx +
        options.row_height_px * static_cast<int>(timeline.rows.size()) +
        kAxisPx;
  }

  std::string Render() {
    const std::string title =
        options_.title.empty()
            ? absl::StrCat(
                  timeline_.strategy.empty() ? "plan" : timeline_.strategy,
                  " plan: ", FormatSecondsLabel(timeline_.step_seconds),
                  " predicted step on ", timeline_.num_ranks, " ranks, ",
                  absl::StrFormat("%.1f%%", 100 * timeline_.idle_fraction),
                  " idle")
            : options_.title;
    absl::StrAppend(&out_, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"",
                    options_.width_px, "\" height=\"", height_px_,
                    "\" viewBox=\"0 0 ", options_.width_px, " ", height_px_,
                    "\" font-family=\"sans-serif\" font-size=\"11\"",
                    " data-num-ranks=\"", timeline_.num_ranks,
                    "\" data-step-seconds=\"", Num(timeline_.step_seconds),
                    "\" data-lower-bound-seconds=\"",
                    Num(timeline_.lower_bound_seconds), "\">\n");
    absl::StrAppend(&out_, "<title>", XmlEscape(title), "</title>\n");
    absl::StrAppend(&out_, "<rect x=\"0\" y=\"0\" width=\"", options_.width_px,
                    "\" height=\"", height_px_, "\" fill=\"#ffffff\"/>\n");
    absl::StrAppend(&out_, "<text x=\"8\" y=\"18\" font-size=\"14\" ",
                    "font-weight=\"bold\">", XmlEscape(title), "</text>\n");
    Legend();
    Axis();
    for (size_t i = 0; i < timeline_.rows.size(); ++i) Row(i);
    Markers();
    absl::StrAppend(&out_, "</svg>\n");
    return std::move(out_);
  }

 private:
  double X(double seconds) const {
    return kLabelWidthPx + plot_width_px_ * seconds / extent_seconds_;
  }
  double W(double seconds) const {
    return std::max(0.0, plot_width_px_ * seconds / extent_seconds_);
  }
  double RowTop(size_t i) const {
    return kHeaderPx + options_.row_height_px * static_cast<double>(i);
  }

  void Legend() {
    double x = 8;
    const double y = 34;
    auto item = [&](const char* color, const std::string& name) {
      absl::StrAppend(&out_, "<rect class=\"legend\" x=\"", Px(x), "\" y=\"",
                      Px(y), "\" width=\"12\" height=\"12\" fill=\"", color,
                      "\"/><text x=\"", Px(x + 16), "\" y=\"", Px(y + 10),
                      "\">", XmlEscape(name), "</text>\n");
      x += 24 + 7.0 * name.size();
    };
    for (TimelinePart part :
         {TimelinePart::kForward, TimelinePart::kRecompute,
          TimelinePart::kBackward, TimelinePart::kAllToAll,
          TimelinePart::kExposedAllReduce, TimelinePart::kOptimizerStep}) {
      item(PartColor(part), part == TimelinePart::kExposedAllReduce
                                ? "exposed all-reduce"
                                : TimelinePartName(part));
    }
    item(kIdleColor, "waiting");
    const bool measured =
        std::any_of(timeline_.rows.begin(), timeline_.rows.end(),
                    [](const TimelineRow& row) {
                      return !row.measured_micro_batch_seconds.empty();
                    });
    if (measured) item(kMeasuredColor, "measured micro-batch");
  }

  void Axis() {
    const double bottom = RowTop(timeline_.rows.size());
    const double step = TickStep(extent_seconds_, 8);
    absl::StrAppend(&out_, "<g class=\"axis\">\n");
    for (double t = 0; t <= extent_seconds_ + 1e-12; t += step) {
      absl::StrAppend(&out_, "<line x1=\"", Px(X(t)), "\" y1=\"",
                      Px(kHeaderPx - 4), "\" x2=\"", Px(X(t)), "\" y2=\"",
                      Px(bottom + 4), "\" stroke=\"#f0f0f0\"/>", "<text x=\"",
                      Px(X(t)), "\" y=\"", Px(bottom + 18),
                      "\" text-anchor=\"middle\">",
                      XmlEscape(FormatSecondsLabel(t)), "</text>\n");
    }
    absl::StrAppend(&out_, "<text x=\"", Px(kLabelWidthPx + plot_width_px_),
                    "\" y=\"", Px(bottom + 32),
                    "\" text-anchor=\"end\">time in the step</text>\n</g>\n");
  }

  void Bar(const char* css_class, const TimelineBar& bar, double top,
           double height, const char* color) {
    absl::StrAppend(
        &out_, "<rect class=\"", css_class, "\" x=\"", Px(X(bar.start_seconds)),
        "\" y=\"", Px(top), "\" width=\"", Px(W(bar.duration_seconds)),
        "\" height=\"", Px(height), "\" fill=\"", color, "\" data-part=\"",
        TimelinePartName(bar.part), "\" data-start-seconds=\"",
        Num(bar.start_seconds), "\" data-duration-seconds=\"",
        Num(bar.duration_seconds), "\" data-micro-batch=\"", bar.micro_batch,
        "\"><title>", XmlEscape(TimelinePartName(bar.part)));
    if (bar.micro_batch >= 0) {
      absl::StrAppend(&out_, ", micro-batch ", bar.micro_batch);
    }
    absl::StrAppend(&out_, ": ",
                    XmlEscape(FormatSecondsLabel(bar.duration_seconds)),
                    "</title></rect>\n");
  }

  void Row(size_t i) {
    const TimelineRow& row = timeline_.rows[i];
    const double top = RowTop(i) + 1;
    const double height = options_.row_height_px - 2;
    const bool measured = !row.measured_micro_batch_seconds.empty();
    const double predicted_height = measured ? height / 2 : height;
    std::string label =
        row.num_groups > 1
            ? absl::StrCat(row.num_groups, " groups of SP ", row.sp_size, ", ",
                           row.ranks_label, ": slowest ", row.num_micro_batches,
                           " mb")
            : absl::StrCat("SP ", row.sp_size, " x ", row.num_micro_batches,
                           " mb, ", row.ranks_label);
    absl::StrAppend(&out_, "<g class=\"row\" data-ranks=\"",
                    absl::StrJoin(row.ranks, ","), "\" data-sp-size=\"",
                    row.sp_size, "\" data-groups=\"", row.num_groups,
                    "\" data-group-index=\"", row.group_index,
                    "\" data-micro-batches=\"", row.num_micro_batches,
                    "\" data-busy-seconds=\"", Num(row.busy_seconds), "\">\n");
    absl::StrAppend(&out_, "<text class=\"label\" x=\"", Px(kLabelWidthPx - 6),
                    "\" y=\"", Px(top + height / 2 + 4),
                    "\" text-anchor=\"end\">", XmlEscape(label), "</text>\n");
    // Waiting for the slowest group, then the parts.
    if (timeline_.slowest_group_seconds > row.busy_seconds) {
      absl::StrAppend(
          &out_, "<rect class=\"idle\" x=\"", Px(X(row.busy_seconds)),
          "\" y=\"", Px(top), "\" width=\"",
          Px(W(timeline_.slowest_group_seconds - row.busy_seconds)),
          "\" height=\"", Px(height), "\" fill=\"", kIdleColor,
          "\" data-start-seconds=\"", Num(row.busy_seconds),
          "\" data-duration-seconds=\"",
          Num(timeline_.slowest_group_seconds - row.busy_seconds),
          "\"><title>waiting for the slowest group</title></rect>\n");
    }
    for (const TimelineBar& bar : row.bars) {
      // The step-end bars span the row, measured or not.
      const bool step_end = bar.part == TimelinePart::kExposedAllReduce ||
                            bar.part == TimelinePart::kOptimizerStep;
      Bar("bar", bar, top, step_end ? height : predicted_height,
          PartColor(bar.part));
    }
    for (size_t m = 0; m < row.micro_batches.size(); ++m) {
      const TimelineMicroBatch& micro_batch = row.micro_batches[m];
      absl::StrAppend(
          &out_, "<rect class=\"micro-batch\" x=\"",
          Px(X(micro_batch.start_seconds)), "\" y=\"", Px(top), "\" width=\"",
          Px(W(micro_batch.duration_seconds)), "\" height=\"",
          Px(predicted_height),
          "\" fill=\"none\" stroke=\"#ffffff\" stroke-width=\"0.8\"><title>",
          "micro-batch ", m, ": ", micro_batch.num_sequences, " sequences, ",
          micro_batch.tokens, " tokens, ", micro_batch.checkpointed_layers,
          " layers recomputed, ",
          XmlEscape(FormatSecondsLabel(micro_batch.duration_seconds)),
          "</title></rect>\n");
    }
    if (measured) {
      double t = 0;
      for (size_t m = 0; m < row.measured_micro_batch_seconds.size(); ++m) {
        const double seconds = row.measured_micro_batch_seconds[m];
        absl::StrAppend(
            &out_, "<rect class=\"measured\" x=\"", Px(X(t)), "\" y=\"",
            Px(top + predicted_height), "\" width=\"", Px(W(seconds)),
            "\" height=\"", Px(height - predicted_height), "\" fill=\"",
            kMeasuredColor,
            "\" stroke=\"#ffffff\" stroke-width=\"0.8\" data-micro-batch=\"", m,
            "\" data-start-seconds=\"", Num(t), "\" data-duration-seconds=\"",
            Num(seconds), "\"><title>measured micro-batch ", m, ": ",
            XmlEscape(FormatSecondsLabel(seconds)), "</title></rect>\n");
        t += seconds;
      }
    }
    // The group's outline.
    absl::StrAppend(
        &out_, "<rect class=\"group\" x=\"", Px(X(0)), "\" y=\"", Px(top),
        "\" width=\"", Px(W(row.busy_seconds)), "\" height=\"", Px(height),
        "\" fill=\"none\" stroke=\"#333333\" stroke-width=\"1\"/>\n", "</g>\n");
  }

  void Markers() {
    const double bottom = RowTop(timeline_.rows.size());
    auto line = [&](const char* css_class, double seconds, const char* color,
                    const std::string& text, double text_y) {
      // Labels near the right edge run leftwards.
      const bool flip = X(seconds) > options_.width_px - 160;
      absl::StrAppend(
          &out_, "<g class=\"", css_class, "\" data-seconds=\"", Num(seconds),
          "\"><line x1=\"", Px(X(seconds)), "\" y1=\"", Px(kHeaderPx - 8),
          "\" x2=\"", Px(X(seconds)), "\" y2=\"", Px(bottom), "\" stroke=\"",
          color, "\" stroke-width=\"1.5\" stroke-dasharray=\"5,3\"/>",
          "<text x=\"", Px(X(seconds) + (flip ? -3 : 3)), "\" y=\"", Px(text_y),
          "\" fill=\"", color, "\" text-anchor=\"", flip ? "end" : "start",
          "\">", XmlEscape(text), "</text></g>\n");
    };
    if (timeline_.lower_bound_seconds > 0) {
      line("lower-bound", timeline_.lower_bound_seconds, "#000000",
           absl::StrCat("lower bound ",
                        FormatSecondsLabel(timeline_.lower_bound_seconds)),
           kHeaderPx - 10);
    }
    if (timeline_.measured_step_seconds.has_value()) {
      line("measured-step", *timeline_.measured_step_seconds, "#2b7a78",
           absl::StrCat("measured step ",
                        FormatSecondsLabel(*timeline_.measured_step_seconds)),
           kHeaderPx - 22);
    }
  }

  const Timeline& timeline_;
  const TimelineSvgOptions& options_;
  double extent_seconds_ = 1;
  int plot_width_px_ = 100;
  int height_px_ = 0;
  std::string out_;
};

}  // namespace

std::string XmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') {
          out += '?';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string FormatSecondsLabel(double seconds) {
  if (seconds == 0) return "0 s";
  if (std::abs(seconds) < 1) return absl::StrFormat("%.3g ms", seconds * 1e3);
  return absl::StrFormat("%.3g s", seconds);
}

std::string RenderTimelineSvg(const Timeline& timeline,
                              const TimelineSvgOptions& options) {
  return SvgWriter(timeline, options).Render();
}

}  // namespace dcp
