#include "cost_model/micro_batch_fit.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cost_model/least_squares.h"

namespace dcp {
namespace {

// Columns of the fit: [work, micro-batch, layer pass, sequence-layer pass].
constexpr int kColumns = 4;
constexpr const char* kColumnNames[kColumns] = {
    "rate scale", "micro_batch_fixed_seconds", "layer_fixed_seconds",
    "sequence_layer_fixed_seconds"};

// Solves the relative-error problem over `rows` with the columns in `kept`
// (the others held at 0); nullopt when the solve fails.
absl::StatusOr<std::vector<double>> Solve(
    const std::vector<std::vector<double>>& rows,
    const std::vector<double>& measured, const std::vector<int>& kept,
    int skipped_row) {
  std::vector<std::vector<double>> scaled;
  std::vector<double> targets;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (static_cast<int>(i) == skipped_row) continue;
    std::vector<double> row;
    for (int column : kept) row.push_back(rows[i][column] / measured[i]);
    scaled.push_back(std::move(row));
    targets.push_back(1.0);
  }
  absl::StatusOr<LeastSquaresFit> fit = FitLeastSquares(
      scaled, targets, LeastSquaresOptions{/*relative_error=*/false});
  if (!fit.ok()) return fit.status();
  std::vector<double> coefficients(kColumns, 0.0);
  for (size_t j = 0; j < kept.size(); ++j) {
    if (!std::isfinite(fit->coefficients[j])) {
      return absl::InternalError("non-finite coefficient");
    }
    coefficients[kept[j]] = fit->coefficients[j];
  }
  return coefficients;
}

// Holds negative fixed terms at zero one at a time (the most negative
// first) until every coefficient is physical; the columns kept at the end.
absl::StatusOr<std::pair<std::vector<double>, std::vector<int>>> SolvePhysical(
    const std::vector<std::vector<double>>& rows,
    const std::vector<double>& measured, int skipped_row) {
  std::vector<int> kept = {0, 1, 2, 3};
  while (true) {
    absl::StatusOr<std::vector<double>> c =
        Solve(rows, measured, kept, skipped_row);
    if (!c.ok()) return c.status();
    int most_negative = -1;
    for (int column : kept) {
      if (column == 0) continue;
      if ((*c)[column] < 0 &&
          (most_negative < 0 || (*c)[column] < (*c)[most_negative])) {
        most_negative = column;
      }
    }
    if (most_negative < 0) return std::make_pair(*std::move(c), kept);
    kept.erase(std::find(kept.begin(), kept.end(), most_negative));
  }
}

double Predict(const std::vector<double>& row,
               const std::vector<double>& coefficients) {
  double predicted = 0;
  for (int j = 0; j < kColumns; ++j) predicted += row[j] * coefficients[j];
  return predicted;
}

}  // namespace

double MicroBatchWorkSeconds(const ModelSpec& model,
                             const ComputeParams& params,
                             const MicroBatchShape& shape,
                             int checkpointed_layers) {
  ComputeParams rates_only = params;
  rates_only.layer_fixed_seconds = 0;
  rates_only.micro_batch_fixed_seconds = 0;
  rates_only.sequence_layer_fixed_seconds = 0;
  const ComputeModel compute(model, rates_only);
  const double forward = compute.LayerForwardSeconds(shape);
  const double backward = compute.LayerBackwardSeconds(shape);
  return model.num_layers * (forward + backward) +
         checkpointed_layers * forward + compute.HeadSeconds(shape);
}

ModelFitReport FitMicroBatches(const ModelSpec& model,
                               const std::vector<ProfileSample>& samples,
                               ComputeParams& compute) {
  ModelFitReport report;
  report.name = "micro_batch";
  report.num_samples = static_cast<int>(samples.size());
  constexpr size_t kNeeded = 2 * kColumns;
  if (samples.size() < kNeeded) {
    report.note = absl::StrCat(samples.size(), " samples, need at least ",
                               kNeeded, "; keeping defaults");
    return report;
  }
  std::set<int> recompute_counts;
  std::set<int> sequence_counts;
  std::vector<std::vector<double>> rows;
  std::vector<double> measured;
  for (const ProfileSample& s : samples) {
    recompute_counts.insert(s.checkpointed_layers);
    sequence_counts.insert(s.num_sequences);
    const double passes = 2.0 * model.num_layers + s.checkpointed_layers;
    rows.push_back(
        {MicroBatchWorkSeconds(model, compute, ShapeOfMicroBatchSample(s),
                               s.checkpointed_layers),
         1.0, passes, passes * s.num_sequences});
    measured.push_back(s.measured_seconds);
  }
  if (recompute_counts.size() < 2 || sequence_counts.size() < 2) {
    report.note = absl::StrCat(
        "samples at ", recompute_counts.size(), " checkpointed-layer and ",
        sequence_counts.size(),
        " sequence counts cannot tell the fixed terms apart (profile two or "
        "more of each); keeping defaults");
    return report;
  }
  auto fit = SolvePhysical(rows, measured, /*skipped_row=*/-1);
  if (!fit.ok()) {
    report.note = absl::StrCat("least-squares fit failed (",
                               fit.status().message(), "); keeping defaults");
    return report;
  }
  const std::vector<double>& c = fit->first;
  if (!(c[0] > 0)) {
    report.note = absl::StrCat("non-physical fit: rate scale ", c[0],
                               " is not positive; keeping defaults");
    return report;
  }
  double sum_squares = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double error =
        std::abs(Predict(rows[i], c) - measured[i]) / measured[i];
    sum_squares += error * error;
    report.max_relative_error = std::max(report.max_relative_error, error);
  }
  report.rms_relative_error = std::sqrt(sum_squares / rows.size());
  // Leave-one-out: each sample predicted by a fit without it.
  double held_out_squares = 0;
  int held_out = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    auto without = SolvePhysical(rows, measured, static_cast<int>(i));
    if (!without.ok()) continue;
    const double error =
        std::abs(Predict(rows[i], without->first) - measured[i]) / measured[i];
    held_out_squares += error * error;
    ++held_out;
  }
  if (held_out > 0) {
    report.held_out_samples = held_out;
    report.held_out_rms_relative_error = std::sqrt(held_out_squares / held_out);
  }
  std::vector<std::string> held;
  for (int column = 1; column < kColumns; ++column) {
    if (std::find(fit->second.begin(), fit->second.end(), column) ==
        fit->second.end()) {
      held.push_back(kColumnNames[column]);
    }
  }
  const double scale = c[0];
  compute.gemm_flops_per_second /= scale;
  compute.attention_forward_flops_per_second /= scale;
  compute.attention_backward_flops_per_second /= scale;
  compute.elementwise_bytes_per_second /= scale;
  compute.micro_batch_fixed_seconds = c[1];
  compute.layer_fixed_seconds = c[2];
  compute.sequence_layer_fixed_seconds = c[3];
  report.used_defaults = false;
  report.note = absl::StrCat(
      "fitted to ", rows.size(), " whole micro-batches: op rates x 1/", scale,
      ", ", c[1] * 1e6, " us per micro-batch, ", c[2] * 1e6,
      " us per layer pass, ", c[3] * 1e6, " us per sequence per layer pass",
      held.empty()
          ? ""
          : absl::StrCat(" (held at 0: ", absl::StrJoin(held, ", "), ")"));
  return report;
}

ModelFitReport FitOptimizerStep(const std::vector<ProfileSample>& samples,
                                ComputeParams& compute) {
  ModelFitReport report;
  report.name = "optimizer_step";
  report.num_samples = static_cast<int>(samples.size());
  if (samples.empty()) {
    report.note = "0 samples, need at least 1; keeping defaults";
    return report;
  }
  std::vector<double> seconds;
  for (const ProfileSample& s : samples) seconds.push_back(s.measured_seconds);
  std::sort(seconds.begin(), seconds.end());
  const size_t middle = seconds.size() / 2;
  const double median = seconds.size() % 2 == 1
                            ? seconds[middle]
                            : (seconds[middle - 1] + seconds[middle]) / 2;
  double sum_squares = 0;
  for (double s : seconds) {
    const double error = std::abs(median - s) / s;
    sum_squares += error * error;
    report.max_relative_error = std::max(report.max_relative_error, error);
  }
  report.rms_relative_error = std::sqrt(sum_squares / seconds.size());
  compute.optimizer_step_seconds = median;
  report.used_defaults = false;
  report.note = absl::StrCat("median of ", seconds.size(), " samples");
  return report;
}

}  // namespace dcp
