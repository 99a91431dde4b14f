#include "cost_model/micro_batch_fit.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

// Columns of the fit: [work linear in each sequence's length (GEMMs,
// element-wise ops, LM head, the attention's half-efficiency term), the
// attention's quadratic work, micro-batch, layer pass, sequence-layer pass].
// The first two are rate scales (never held at 0); from the third on a
// negative coefficient is held at 0.
constexpr int kColumns = 5;
constexpr int kFirstHeldColumn = 2;
constexpr const char* kColumnNames[kColumns] = {
    "rate scale", "attention rate scale", "micro_batch_fixed_seconds",
    "layer_fixed_seconds", "sequence_layer_fixed_seconds"};
// The attention's own scale is fitted when it cuts the held-out error by at
// least this share.
constexpr double kSplitHeldOutGain = 0.2;

// Solves the relative-error problem over `rows` with the columns in `kept`
// (the others held at 0).
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
// first) until every fixed coefficient is physical; the columns kept at the
// end.
absl::StatusOr<std::pair<std::vector<double>, std::vector<int>>>
SolveFixedTermsPhysical(const std::vector<std::vector<double>>& rows,
                        const std::vector<double>& measured,
                        std::vector<int> kept, int skipped_row) {
  while (true) {
    absl::StatusOr<std::vector<double>> c =
        Solve(rows, measured, kept, skipped_row);
    if (!c.ok()) return c.status();
    int most_negative = -1;
    for (int column : kept) {
      if (column < kFirstHeldColumn) continue;
      if ((*c)[column] < 0 &&
          (most_negative < 0 || (*c)[column] < (*c)[most_negative])) {
        most_negative = column;
      }
    }
    if (most_negative < 0) return std::make_pair(*std::move(c), kept);
    kept.erase(std::find(kept.begin(), kept.end(), most_negative));
  }
}

// The fit with the attention's quadratic work scaled on its own (`split`),
// or one scale for all the work (the quadratic column's coefficient is then
// the work's).
absl::StatusOr<std::pair<std::vector<double>, std::vector<int>>> SolvePhysical(
    const std::vector<std::vector<double>>& rows,
    const std::vector<double>& measured, bool split, int skipped_row) {
  if (split) {
    return SolveFixedTermsPhysical(rows, measured, {0, 1, 2, 3, 4},
                                   skipped_row);
  }
  std::vector<std::vector<double>> merged = rows;
  for (std::vector<double>& row : merged) {
    row[0] += row[1];
    row[1] = 0;
  }
  auto one =
      SolveFixedTermsPhysical(merged, measured, {0, 2, 3, 4}, skipped_row);
  if (!one.ok()) return one;
  one->first[1] = one->first[0];
  return one;
}

double Predict(const std::vector<double>& row,
               const std::vector<double>& coefficients) {
  double predicted = 0;
  for (int j = 0; j < kColumns; ++j) predicted += row[j] * coefficients[j];
  return predicted;
}

// A fit and its errors: on the samples fitted and held out (each sample
// predicted by the fit without it).
struct ScoredFit {
  /// The attention's quadratic work has its own scale.
  bool split = false;
  std::vector<double> coefficients;
  std::vector<int> kept;
  double rms = 0;
  double max = 0;
  double held_out_rms = 0;
  int held_out = 0;
};
absl::StatusOr<ScoredFit> FitAndScore(
    const std::vector<std::vector<double>>& rows,
    const std::vector<double>& measured, bool split) {
  auto fit = SolvePhysical(rows, measured, split, /*skipped_row=*/-1);
  if (!fit.ok()) return fit.status();
  ScoredFit scored;
  scored.split = split;
  scored.coefficients = std::move(fit->first);
  scored.kept = std::move(fit->second);
  if (!(scored.coefficients[0] > 0) || !(scored.coefficients[1] > 0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "non-physical fit: rate scale ", scored.coefficients[0],
        split ? absl::StrCat(", attention rate scale ", scored.coefficients[1])
              : "",
        " is not positive"));
  }
  double sum_squares = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double error =
        std::abs(Predict(rows[i], scored.coefficients) - measured[i]) /
        measured[i];
    sum_squares += error * error;
    scored.max = std::max(scored.max, error);
  }
  scored.rms = std::sqrt(sum_squares / rows.size());
  double held_out_squares = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    auto without = SolvePhysical(rows, measured, split, static_cast<int>(i));
    if (!without.ok()) continue;
    const double error =
        std::abs(Predict(rows[i], without->first) - measured[i]) / measured[i];
    held_out_squares += error * error;
    ++scored.held_out;
  }
  if (scored.held_out > 0) {
    scored.held_out_rms = std::sqrt(held_out_squares / scored.held_out);
  }
  return scored;
}

// The op-level seconds of the micro-batch at `rates` (its layers forward,
// backward and recomputed, and the LM head).
double WorkAt(const ModelSpec& model, const ComputeParams& rates,
              const MicroBatchShape& shape, int checkpointed_layers) {
  const ComputeModel compute(model, rates);
  const double forward = compute.LayerForwardSeconds(shape);
  const double backward = compute.LayerBackwardSeconds(shape);
  return model.num_layers * (forward + backward) +
         checkpointed_layers * forward + compute.HeadSeconds(shape);
}

ComputeParams RatesOnly(ComputeParams params) {
  params.layer_fixed_seconds = 0;
  params.micro_batch_fixed_seconds = 0;
  params.sequence_layer_fixed_seconds = 0;
  return params;
}

}  // namespace

MicroBatchWork MicroBatchWorkParts(const ModelSpec& model,
                                   const ComputeParams& params,
                                   const MicroBatchShape& shape,
                                   int checkpointed_layers) {
  auto work = [&](const ComputeParams& rates) {
    return WorkAt(model, rates, shape, checkpointed_layers);
  };
  const ComputeParams rates_only = RatesOnly(params);
  ComputeParams without_attention = rates_only;
  without_attention.attention_forward_flops_per_second =
      std::numeric_limits<double>::infinity();
  without_attention.attention_backward_flops_per_second =
      std::numeric_limits<double>::infinity();
  // The attention curve's quadratic part: its FLOPs at the asymptotic rate
  // (no half-efficiency length).
  ComputeParams quadratic_only = rates_only;
  quadratic_only.attention_forward_half_length_tokens = 0;
  quadratic_only.attention_backward_half_length_tokens = 0;
  const double total = work(rates_only);
  const double outside = work(without_attention);
  const double quadratic = std::max(0.0, work(quadratic_only) - outside);
  return {outside, quadratic, std::max(0.0, total - outside - quadratic)};
}

double MicroBatchWorkSeconds(const ModelSpec& model,
                             const ComputeParams& params,
                             const MicroBatchShape& shape,
                             int checkpointed_layers) {
  // One cost model, not MicroBatchWorkParts' three: the planner service
  // prices every planned micro-batch with this.
  return WorkAt(model, RatesOnly(params), shape, checkpointed_layers);
}

ModelFitReport FitMicroBatches(const ModelSpec& model,
                               const std::vector<ProfileSample>& samples,
                               ComputeParams& compute) {
  ModelFitReport report;
  report.name = "micro_batch";
  report.num_samples = static_cast<int>(samples.size());
  constexpr size_t kNeeded = 8;
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
    const MicroBatchWork work = MicroBatchWorkParts(
        model, compute, ShapeOfMicroBatchSample(s), s.checkpointed_layers);
    rows.push_back({work.outside_attention + work.attention_linear,
                    work.attention_quadratic, 1.0, passes,
                    passes * s.num_sequences});
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
  // The attention's own scale only where it predicts held-out samples
  // clearly better: a parameter more is not worth fitting to noise.
  absl::StatusOr<ScoredFit> fit = FitAndScore(rows, measured, /*split=*/false);
  absl::StatusOr<ScoredFit> split = FitAndScore(rows, measured, /*split=*/true);
  if (split.ok() &&
      (!fit.ok() ||
       split->held_out_rms < (1 - kSplitHeldOutGain) * fit->held_out_rms)) {
    fit = std::move(split);
  }
  if (!fit.ok()) {
    // A non-physical fit (FitAndScore's FAILED_PRECONDITION) says so itself.
    report.note =
        absl::IsFailedPrecondition(fit.status())
            ? absl::StrCat(fit.status().message(), "; keeping defaults")
            : absl::StrCat("least-squares fit failed (", fit.status().message(),
                           "); keeping defaults");
    return report;
  }
  const std::vector<double>& c = fit->coefficients;
  report.rms_relative_error = fit->rms;
  report.max_relative_error = fit->max;
  if (fit->held_out > 0) {
    report.held_out_samples = fit->held_out;
    report.held_out_rms_relative_error = fit->held_out_rms;
  }
  std::vector<std::string> held;
  for (int column = kFirstHeldColumn; column < kColumns; ++column) {
    if (std::find(fit->kept.begin(), fit->kept.end(), column) ==
        fit->kept.end()) {
      held.push_back(kColumnNames[column]);
    }
  }
  const double scale = c[0];
  // The attention's rate takes its quadratic scale; its half-efficiency
  // length (the linear term over the quadratic one) the ratio of the two.
  const double attention_scale = c[1];
  const double half_length_scale = c[0] / c[1];
  ScaleOpTimes(scale, attention_scale, compute);
  compute.attention_forward_half_length_tokens *= half_length_scale;
  compute.attention_backward_half_length_tokens *= half_length_scale;
  compute.micro_batch_fixed_seconds = c[2];
  compute.layer_fixed_seconds = c[3];
  compute.sequence_layer_fixed_seconds = c[4];
  report.used_defaults = false;
  report.note = absl::StrCat(
      "fitted to ", rows.size(), " whole micro-batches: op rates x 1/", scale,
      fit->split
          ? absl::StrCat(", attention rate x 1/", attention_scale,
                         " and half-efficiency length x ", half_length_scale)
          : "",
      ", ", c[2] * 1e6, " us per micro-batch, ", c[3] * 1e6,
      " us per layer pass, ", c[4] * 1e6, " us per sequence per layer pass",
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
