#include "worker/device_check/error_table.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/percentile.h"

namespace dcp {
namespace {

// Seconds as printed: 6 significant digits.
std::string SecondsText(double seconds) {
  return absl::StrFormat("%.6g", seconds);
}

// Bytes as printed: a whole number.
std::string BytesText(double bytes) {
  return absl::StrFormat("%.0f", std::round(bytes));
}

double Parsed(const std::string& text) {
  return std::strtod(text.c_str(), nullptr);
}

std::string PercentText(std::optional<double> error) {
  return error.has_value() ? absl::StrFormat("%.2f%%", *error * 100) : "n/a";
}

// The relative error of what the table prints for these values.
std::optional<double> PrintedError(const std::string& predicted,
                                   const std::string& measured) {
  return RelativeError(Parsed(predicted), Parsed(measured));
}

struct Worst {
  double error = -1;
  const CheckRow* row = nullptr;
};

std::string SummaryLine(const char* what, const std::vector<double>& errors,
                        const Worst& worst) {
  if (errors.empty()) return absl::StrCat(what, " error: no rows\n");
  const ErrorSummary summary = SummarizeErrors(errors);
  return absl::StrFormat(
      "%s error over %d rows: median %.2f%%, worst %.2f%% (%s, %d tokens, %d "
      "recomputed)\n",
      what, summary.count, summary.median * 100, summary.worst * 100,
      worst.row->model, worst.row->tokens, worst.row->checkpointed_layers);
}

}  // namespace

std::optional<double> RelativeError(double predicted, double measured) {
  if (!(measured > 0) || !std::isfinite(predicted)) return std::nullopt;
  return std::fabs(predicted - measured) / measured;
}

ErrorSummary SummarizeErrors(const std::vector<double>& errors) {
  ErrorSummary summary;
  summary.count = static_cast<int>(errors.size());
  if (errors.empty()) return summary;
  summary.median = Percentile(errors, 0.5);
  summary.worst = Percentile(errors, 1.0);
  return summary;
}

std::string FormatErrorTable(const std::vector<CheckRow>& rows) {
  std::string out =
      "| model | layers | tokens | recomputed layers | predicted s | "
      "measured s | time error | predicted peak bytes | measured peak bytes "
      "| peak error |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  std::vector<double> time_errors;
  std::vector<double> peak_errors;
  Worst worst_time;
  Worst worst_peak;
  for (const CheckRow& row : rows) {
    const std::string predicted_s = SecondsText(row.predicted_seconds);
    const std::string measured_s = SecondsText(row.measured_seconds);
    const std::optional<double> time_error =
        PrintedError(predicted_s, measured_s);
    const std::string predicted_b = BytesText(row.predicted_peak_bytes);
    std::string measured_b = "n/a";
    std::optional<double> peak_error;
    if (row.measured_peak_bytes.has_value()) {
      measured_b = BytesText(*row.measured_peak_bytes);
      peak_error = PrintedError(predicted_b, measured_b);
    }
    if (time_error.has_value()) {
      time_errors.push_back(*time_error);
      if (*time_error > worst_time.error) worst_time = {*time_error, &row};
    }
    if (peak_error.has_value()) {
      peak_errors.push_back(*peak_error);
      if (*peak_error > worst_peak.error) worst_peak = {*peak_error, &row};
    }
    absl::StrAppend(&out, "| ", row.model, " | ", row.num_layers, " | ",
                    row.tokens, " | ", row.checkpointed_layers, " | ",
                    predicted_s, " | ", measured_s, " | ",
                    PercentText(time_error), " | ", predicted_b, " | ",
                    measured_b, " | ", PercentText(peak_error), " |\n");
  }
  absl::StrAppend(&out, "\n", SummaryLine("time", time_errors, worst_time),
                  SummaryLine("peak", peak_errors, worst_peak));
  return out;
}

std::string FormatErrorTableTsv(const std::vector<CheckRow>& rows) {
  std::string out =
      "model\tlayers\ttokens\tcheckpointed_layers\tpredicted_seconds\t"
      "measured_seconds\tpredicted_peak_bytes\tmeasured_peak_bytes\n";
  for (const CheckRow& row : rows) {
    absl::StrAppend(
        &out,
        absl::StrFormat("%s\t%d\t%d\t%d\t%.17g\t%.17g\t%.17g\t%s\n", row.model,
                        row.num_layers, row.tokens, row.checkpointed_layers,
                        row.predicted_seconds, row.measured_seconds,
                        row.predicted_peak_bytes,
                        row.measured_peak_bytes.has_value()
                            ? absl::StrFormat("%.17g", *row.measured_peak_bytes)
                            : std::string("n/a")));
  }
  return out;
}

}  // namespace dcp
