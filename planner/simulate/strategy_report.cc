#include "planner/simulate/strategy_report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <numeric>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/percentile.h"
#include "planner/simulate/timeline.h"
#include "planner/simulate/timeline_svg.h"

namespace dcp {
namespace {

constexpr int kChartWidthPx = 960;
constexpr char kBucket[] = "bucket";
constexpr char kPacked[] = "packed";
constexpr char kBestStatic[] = "best-static";

std::string Fixed(double value, int digits) {
  return absl::StrFormat("%.*f", digits, value);
}

std::string Percent(double fraction) {
  return absl::StrFormat("%.1f%%", 100 * fraction);
}

// "1K", "32K", "1M" for a power-of-two length.
std::string LengthLabel(int64_t tokens) {
  if (tokens >= (int64_t{1} << 20) && tokens % (int64_t{1} << 20) == 0) {
    return absl::StrCat(tokens >> 20, "M");
  }
  if (tokens >= 1024 && tokens % 1024 == 0) {
    return absl::StrCat(tokens >> 10, "K");
  }
  return absl::StrCat(tokens);
}

// Sequences and tokens per power-of-two length bin [2^k, 2^(k+1)).
std::string LengthHistogramSvg(
    const std::vector<std::vector<int64_t>>& batches) {
  std::map<int, std::pair<int64_t, double>> bins;  // k -> (sequences, tokens)
  double total_tokens = 0;
  int64_t total_sequences = 0;
  for (const std::vector<int64_t>& batch : batches) {
    for (int64_t length : batch) {
      const int k = length > 0 ? static_cast<int>(std::floor(
                                     std::log2(static_cast<double>(length))))
                               : 0;
      bins[k].first += 1;
      bins[k].second += static_cast<double>(length);
      total_tokens += static_cast<double>(length);
      ++total_sequences;
    }
  }
  if (bins.empty()) return "";
  const int first = bins.begin()->first;
  const int last = bins.rbegin()->first;
  const int count = last - first + 1;
  const double left = 60;
  const double top = 20;
  const double height = 160;
  const double slot = (kChartWidthPx - left - 20) / count;
  double max_fraction = 0;
  for (const auto& [k, bin] : bins) {
    max_fraction = std::max({max_fraction,
                             static_cast<double>(bin.first) / total_sequences,
                             bin.second / total_tokens});
  }
  std::string svg = absl::StrCat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"histogram\" width=\"",
      kChartWidthPx, "\" height=\"", top + height + 50,
      "\" font-family=\"sans-serif\" font-size=\"11\">\n");
  absl::StrAppend(&svg,
                  "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n");
  for (int k = first; k <= last; ++k) {
    const auto it = bins.find(k);
    const double sequences =
        it == bins.end()
            ? 0
            : static_cast<double>(it->second.first) / total_sequences;
    const double tokens =
        it == bins.end() ? 0 : it->second.second / total_tokens;
    const double x = left + (k - first) * slot;
    const double bar = slot * 0.4;
    const double sequence_height = height * sequences / max_fraction;
    const double token_height = height * tokens / max_fraction;
    absl::StrAppend(
        &svg, "<g class=\"bin\" data-min-tokens=\"", int64_t{1} << k,
        "\" data-sequences=\"", it == bins.end() ? 0 : it->second.first,
        "\" data-token-fraction=\"", absl::StrFormat("%.6g", tokens), "\">",
        "<rect x=\"", Fixed(x + slot * 0.1, 2), "\" y=\"",
        Fixed(top + height - sequence_height, 2), "\" width=\"", Fixed(bar, 2),
        "\" height=\"", Fixed(sequence_height, 2),
        "\" fill=\"#4e79a7\"><title>", Percent(sequences),
        " of sequences</title></rect>", "<rect x=\"", Fixed(x + slot * 0.5, 2),
        "\" y=\"", Fixed(top + height - token_height, 2), "\" width=\"",
        Fixed(bar, 2), "\" height=\"", Fixed(token_height, 2),
        "\" fill=\"#f28e2b\"><title>", Percent(tokens),
        " of tokens</title></rect>", "<text x=\"", Fixed(x + slot / 2, 2),
        "\" y=\"", Fixed(top + height + 14, 2), "\" text-anchor=\"middle\">",
        LengthLabel(int64_t{1} << k), "</text></g>\n");
  }
  absl::StrAppend(
      &svg, "<text x=\"", left, "\" y=\"", top + height + 34,
      "\">length bin (tokens, from)  ",
      "<tspan fill=\"#4e79a7\">&#9632; share "
      "of sequences</tspan>  <tspan fill=\"#f28e2b\">&#9632; share of "
      "tokens</tspan></text>\n</svg>\n");
  return svg;
}

// Each strategy's predicted step times: a dot per batch, a box from the
// 25th to the 75th percentile, a tick at the median.
std::string StepDistributionSvg(const SimulationReport& report) {
  double extent = 0;
  for (const StrategyStats& stats : report.strategies) {
    for (double seconds : stats.step_seconds)
      extent = std::max(extent, seconds);
  }
  extent = extent > 0 ? extent * 1.05 : 1;
  const double left = 200;
  const double row = 30;
  const double width = kChartWidthPx - left - 20;
  const double height = row * report.strategies.size() + 30;
  std::string svg = absl::StrCat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"distribution\" "
      "width=\"",
      kChartWidthPx, "\" height=\"", height,
      "\" font-family=\"sans-serif\" font-size=\"11\">\n",
      "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n");
  auto x_of = [&](double seconds) { return left + width * seconds / extent; };
  for (size_t s = 0; s < report.strategies.size(); ++s) {
    const StrategyStats& stats = report.strategies[s];
    const double y = 10 + row * s + row / 2;
    const double p25 = Percentile(stats.step_seconds, 0.25);
    const double p50 = Percentile(stats.step_seconds, 0.50);
    const double p75 = Percentile(stats.step_seconds, 0.75);
    absl::StrAppend(
        &svg, "<g class=\"strategy\" data-name=\"", XmlEscape(stats.name),
        "\" data-median-seconds=\"", absl::StrFormat("%.6g", p50), "\">",
        "<text x=\"", left - 8, "\" y=\"", Fixed(y + 4, 2),
        "\" text-anchor=\"end\">", XmlEscape(stats.name), "</text>",
        "<rect x=\"", Fixed(x_of(p25), 2), "\" y=\"", Fixed(y - 8, 2),
        "\" width=\"", Fixed(std::max(1.0, x_of(p75) - x_of(p25)), 2),
        "\" height=\"16\" fill=\"#dde6f0\" stroke=\"#4e79a7\"/>", "<line x1=\"",
        Fixed(x_of(p50), 2), "\" x2=\"", Fixed(x_of(p50), 2), "\" y1=\"",
        Fixed(y - 10, 2), "\" y2=\"", Fixed(y + 10, 2),
        "\" stroke=\"#000\" stroke-width=\"2\"/>");
    for (double seconds : stats.step_seconds) {
      absl::StrAppend(&svg, "<circle class=\"step\" cx=\"",
                      Fixed(x_of(seconds), 2), "\" cy=\"", Fixed(y, 2),
                      "\" r=\"2.5\" fill=\"#e15759\" ", "data-seconds=\"",
                      absl::StrFormat("%.6g", seconds), "\"/>");
    }
    absl::StrAppend(&svg, "</g>\n");
  }
  const double axis_y = 10 + row * report.strategies.size() + 14;
  for (int i = 0; i <= 5; ++i) {
    const double seconds = extent * i / 5;
    absl::StrAppend(&svg, "<text x=\"", Fixed(x_of(seconds), 2), "\" y=\"",
                    Fixed(axis_y, 2), "\" text-anchor=\"middle\">",
                    XmlEscape(FormatSecondsLabel(seconds)), "</text>");
  }
  absl::StrAppend(&svg, "\n</svg>\n");
  return svg;
}

// The step whose predicted time is the (lower) median of the strategy's.
size_t MedianStep(const std::vector<double>& step_seconds) {
  std::vector<size_t> order(step_seconds.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return step_seconds[a] < step_seconds[b];
  });
  return order[(order.size() - 1) / 2];
}

// best-static when it was simulated, else the faster of bucket and packed;
// null when neither was.
const StrategyStats* BestStatic(const SimulationReport& report) {
  const StrategyStats* best = nullptr;
  for (const StrategyStats& stats : report.strategies) {
    if (stats.name == kBestStatic) return &stats;
    if ((stats.name == kBucket || stats.name == kPacked) &&
        (best == nullptr ||
         stats.mean_step_seconds < best->mean_step_seconds)) {
      best = &stats;
    }
  }
  return best;
}

constexpr char kStyle[] =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1240px}"
    "h1{font-size:22px}h2{font-size:17px;margin-top:28px}"
    "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:4px "
    "10px;text-align:right}th:first-child,td:first-child{text-align:left}"
    "tr.best-static td{background:#f3f3f3}tr.dcp td{font-weight:bold}"
    "code{background:#f4f4f4;padding:1px 4px}.note{color:#555;font-size:13px}"
    "figure{margin:12px 0 28px 0}figcaption{font-size:13px;color:#444}";

}  // namespace

absl::StatusOr<std::string> RenderStrategyReportHtml(
    const SimulationReport& report, const CostModel& cost_model,
    const StrategyReportOptions& options) {
  if (report.strategies.empty()) {
    return absl::InvalidArgumentError("the simulation has no strategies");
  }
  const size_t steps = report.batch_lengths.size();
  if (steps == 0) {
    return absl::InvalidArgumentError(
        "the simulation kept no batches; run it with keep_plans");
  }
  for (const StrategyStats& stats : report.strategies) {
    const size_t plans =
        std::max(stats.plans.size(), stats.phased_plans.size());
    if (plans != steps || stats.step_seconds.size() != steps) {
      return absl::InvalidArgumentError(
          absl::StrCat("strategy ", stats.name, " has ", plans, " plans and ",
                       stats.step_seconds.size(), " step times for ", steps,
                       " batches; run the simulation with keep_plans"));
    }
  }
  const StrategyStats* best_static = BestStatic(report);

  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>DCP strategy report</title><style>";
  absl::StrAppend(&html, kStyle, "</style></head>\n<body>\n");
  absl::StrAppend(&html, "<h1>DCP strategy report</h1>\n<p class=\"note\">",
                  "Every time on this page is a <b>cost-model prediction</b> ",
                  "for ", XmlEscape(cost_model.model().name), " on ",
                  cost_model.cluster().num_nodes, " x ",
                  cost_model.cluster().gpus_per_node, " GPUs, over ", steps,
                  " global batches of ", XmlEscape(report.workload_description),
                  ".");
  if (!options.command_line.empty()) {
    absl::StrAppend(&html, " Made by <code>", XmlEscape(options.command_line),
                    "</code>.");
  }
  absl::StrAppend(&html, "</p>\n");

  // The table.
  absl::StrAppend(
      &html,
      "<h2>Strategies</h2>\n<table id=\"strategies\"><tr><th>strategy</th>"
      "<th>mean step</th><th>vs best static</th><th>vs bucket</th>"
      "<th>idle</th><th>peak memory</th><th>gap to lower bound</th></tr>\n");
  for (const StrategyStats& stats : report.strategies) {
    const std::string css = &stats == best_static ? "best-static"
                            : stats.name == "dcp" ? "dcp"
                                                  : "";
    absl::StrAppend(
        &html, "<tr class=\"", css, "\" data-name=\"", XmlEscape(stats.name),
        "\"><td>", XmlEscape(stats.name),
        stats.setting.empty()
            ? std::string()
            : absl::StrCat(" (", XmlEscape(stats.setting), ")"),
        "</td><td>", XmlEscape(FormatSecondsLabel(stats.mean_step_seconds)),
        "</td><td>",
        best_static != nullptr && stats.mean_step_seconds > 0
            ? absl::StrFormat("%.2fx", best_static->mean_step_seconds /
                                           stats.mean_step_seconds)
            : std::string("-"),
        "</td><td>", absl::StrFormat("%.2fx", stats.speedup_vs_bucket),
        "</td><td>", Percent(stats.mean_idle_fraction), "</td><td>",
        Percent(stats.max_memory_fraction), "</td><td>",
        Percent(stats.mean_gap_to_lower_bound), "</td></tr>\n");
  }
  absl::StrAppend(
      &html, "</table>\n<p class=\"note\">Lower bound: ",
      XmlEscape(FormatSecondsLabel(report.lower_bound_mean_step_seconds)),
      " mean step. ");
  if (best_static != nullptr) {
    if (best_static->name == kBestStatic) {
      absl::StrAppend(&html, "Best static setting: <b>",
                      XmlEscape(best_static->setting),
                      "</b> (shaded; the least mean step time of bucket and "
                      "packed at every legal SP size over these batches). ");
    } else {
      absl::StrAppend(&html, "Best static strategy simulated: <b>",
                      XmlEscape(best_static->name),
                      "</b> (shaded; at the static SP size of this run; "
                      "simulate best-static to search every SP size). ");
    }
  } else {
    absl::StrAppend(&html, "No static strategy was simulated. ");
  }
  absl::StrAppend(&html,
                  "Peak memory is the largest micro-batch's predicted peak "
                  "over the memory budget.</p>\n");

  absl::StrAppend(&html, "<h2>Sequence lengths</h2>\n<figure>",
                  LengthHistogramSvg(report.batch_lengths),
                  "<figcaption>Every batch's sequences by power-of-two length "
                  "bin: the share of sequences and of tokens.</figcaption>"
                  "</figure>\n");
  absl::StrAppend(&html, "<h2>Step time over the batches</h2>\n<figure>",
                  StepDistributionSvg(report),
                  "<figcaption>One dot per batch; the box spans the 25th to "
                  "75th percentile, the bar is the median.</figcaption>"
                  "</figure>\n");

  absl::StrAppend(&html, "<h2>Median batch of each strategy</h2>\n");
  TimelineOptions timeline_options;
  timeline_options.max_rows = options.max_timeline_rows;
  for (const StrategyStats& stats : report.strategies) {
    const size_t step = MedianStep(stats.step_seconds);
    // A strategy that re-groups within a step is drawn by its longest phase.
    const bool phased = stats.plans.empty();
    size_t drawn_phase = 0;
    if (phased) {
      const std::vector<Plan>& phases = stats.phased_plans[step].phases;
      for (size_t p = 1; p < phases.size(); ++p) {
        if (phases[p].slowest_group_seconds >
            phases[drawn_phase].slowest_group_seconds) {
          drawn_phase = p;
        }
      }
    }
    const Plan& drawn = phased ? stats.phased_plans[step].phases[drawn_phase]
                               : stats.plans[step];
    absl::StatusOr<Timeline> timeline = BuildTimeline(
        cost_model, report.batch_lengths[step], drawn, timeline_options);
    if (!timeline.ok()) {
      return absl::Status(timeline.status().code(),
                          absl::StrCat(stats.name, ", step ", step, ": ",
                                       timeline.status().message()));
    }
    TimelineSvgOptions svg_options;
    svg_options.title =
        phased ? absl::StrCat(stats.name, ", step ", step, " (its median): ",
                              FormatSecondsLabel(stats.step_seconds[step]),
                              " in ", stats.phased_plans[step].phases.size(),
                              " phases at barriers; drawn: its longest phase, ",
                              drawn_phase, " (",
                              FormatSecondsLabel(timeline->step_seconds),
                              " with the all-reduce)")
               : absl::StrCat(stats.name, ", step ", step, " (its median): ",
                              FormatSecondsLabel(timeline->step_seconds), ", ",
                              Percent(timeline->idle_fraction), " idle");
    absl::StrAppend(&html, "<figure class=\"timeline\" data-strategy=\"",
                    XmlEscape(stats.name), "\" data-step=\"", step, "\"",
                    phased ? absl::StrCat(" data-phase=\"", drawn_phase, "\"")
                           : std::string(),
                    ">", RenderTimelineSvg(*timeline, svg_options),
                    "</figure>\n");
  }
  absl::StrAppend(&html, "</body></html>\n");
  return html;
}

absl::Status WriteStrategyReport(const std::string& directory,
                                 const SimulationReport& report,
                                 const CostModel& cost_model,
                                 const StrategyReportOptions& options) {
  absl::StatusOr<std::string> html =
      RenderStrategyReportHtml(report, cost_model, options);
  if (!html.ok()) return html.status();
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return FileSystemError("creating the report directory", directory,
                           error.value());
  }
  return WriteFileAtomically(
      (std::filesystem::path(directory) / "index.html").string(), *html);
}

}  // namespace dcp
