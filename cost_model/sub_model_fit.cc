#include "cost_model/sub_model_fit.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cost_model/least_squares.h"

namespace dcp {
namespace {

// Solves `problem` with each row scaled by 1/measured and no weights, which
// gives the relative-error weighting with respect to the measured value even
// where an offset (a known term) is subtracted from the target. `dropped`
// (or -1) is a column held at zero; `skipped_row` (or -1) a sample left out.
absl::StatusOr<std::vector<double>> SolveRelative(const LinearProblem& problem,
                                                  int dropped,
                                                  int skipped_row = -1) {
  std::vector<std::vector<double>> scaled_rows;
  std::vector<double> scaled_targets;
  scaled_rows.reserve(problem.rows.size());
  for (int i = 0; i < problem.size(); ++i) {
    if (i == skipped_row) continue;
    const double scale = 1.0 / problem.measured[i];
    std::vector<double> row;
    for (size_t j = 0; j < problem.rows[i].size(); ++j) {
      if (static_cast<int>(j) != dropped) {
        row.push_back(problem.rows[i][j] * scale);
      }
    }
    scaled_rows.push_back(std::move(row));
    scaled_targets.push_back((problem.measured[i] - problem.offsets[i]) *
                             scale);
  }
  absl::StatusOr<LeastSquaresFit> fit =
      FitLeastSquares(scaled_rows, scaled_targets,
                      LeastSquaresOptions{/*relative_error=*/false});
  if (!fit.ok()) return fit.status();
  std::vector<double> coefficients = fit->coefficients;
  if (dropped >= 0) coefficients.insert(coefficients.begin() + dropped, 0.0);
  for (double c : coefficients) {
    if (!std::isfinite(c)) {
      return absl::InternalError("fit gave a non-finite coefficient");
    }
  }
  return coefficients;
}

// The relative error of sample i's prediction by `coefficients`.
double RelativeError(const LinearProblem& problem, int i,
                     const std::vector<double>& coefficients) {
  double predicted = problem.offsets[i];
  for (size_t j = 0; j < problem.rows[i].size(); ++j) {
    predicted += problem.rows[i][j] * coefficients[j];
  }
  return std::abs(predicted - problem.measured[i]) / problem.measured[i];
}

// The rms and max relative errors of `coefficients` over the samples.
std::pair<double, double> RelativeErrors(
    const LinearProblem& problem, const std::vector<double>& coefficients) {
  double sum_squares = 0;
  double max_error = 0;
  for (int i = 0; i < problem.size(); ++i) {
    const double error = RelativeError(problem, i, coefficients);
    sum_squares += error * error;
    max_error = std::max(max_error, error);
  }
  return {std::sqrt(sum_squares / problem.size()), max_error};
}

// Leave-one-out: each sample predicted by the same fit (column `held_at_zero`
// or -1 held at zero) of the others, into `report`.
void AddHeldOutError(const LinearProblem& problem, int held_at_zero,
                     ModelFitReport& report) {
  double sum_squares = 0;
  int held_out = 0;
  for (int i = 0; i < problem.size(); ++i) {
    absl::StatusOr<std::vector<double>> without =
        SolveRelative(problem, held_at_zero, i);
    if (!without.ok()) continue;
    const double error = RelativeError(problem, i, *without);
    sum_squares += error * error;
    ++held_out;
  }
  if (held_out > 0) {
    report.held_out_samples = held_out;
    report.held_out_rms_relative_error = std::sqrt(sum_squares / held_out);
  }
}

}  // namespace

ModelFitReport FitSubModel(std::string name, int num_parameters,
                           int secondary_column, const LinearProblem& problem,
                           const ApplyFn& apply) {
  ModelFitReport report;
  report.name = std::move(name);
  report.num_samples = problem.size();
  const int needed = 2 * num_parameters;
  if (problem.size() < needed) {
    report.note = absl::StrCat(problem.size(), " samples, need at least ",
                               needed, "; keeping defaults");
    return report;
  }
  absl::StatusOr<std::vector<double>> coefficients =
      SolveRelative(problem, /*dropped=*/-1);
  if (!coefficients.ok()) {
    report.note =
        absl::StrCat("least-squares fit failed (",
                     coefficients.status().message(), "); keeping defaults");
    return report;
  }
  std::string constrained;
  int held_at_zero = -1;
  // `apply` checks a candidate and, only when it is physical, writes it.
  if (std::string why = apply(*coefficients); !why.empty()) {
    // A noisy measurement can push the small term below zero; the best
    // physical fit then holds it at zero, if that still explains the
    // samples (else it is no better than the defaults).
    constexpr double kMaxConstrainedRmsError = 0.5;
    absl::StatusOr<std::vector<double>> retry =
        secondary_column >= 0
            ? SolveRelative(problem, secondary_column)
            : absl::StatusOr<std::vector<double>>(
                  absl::FailedPreconditionError("no term may be held at 0"));
    if (!retry.ok() ||
        RelativeErrors(problem, *retry).first > kMaxConstrainedRmsError ||
        !apply(*retry).empty()) {
      report.note =
          absl::StrCat("non-physical fit: ", why, "; keeping defaults");
      return report;
    }
    coefficients = std::move(retry);
    held_at_zero = secondary_column;
    constrained = absl::StrCat(" with coefficient ", secondary_column,
                               " held at 0 (unconstrained: ", why, ")");
  }
  std::tie(report.rms_relative_error, report.max_relative_error) =
      RelativeErrors(problem, *coefficients);
  if (problem.size() > needed) {
    AddHeldOutError(problem, held_at_zero, report);
  }
  report.used_defaults = false;
  report.note =
      absl::StrCat("fitted to ", problem.size(), " samples", constrained);
  return report;
}

// time = flops/P * (1 + half/size) fitted as [1/P, half/P].
ApplyFn ApplyRateCurve(double* flops_per_second, double* half,
                       absl::string_view half_name) {
  return [=](const std::vector<double>& c) -> std::string {
    if (c[0] <= 0) {
      return absl::StrCat("1/rate = ", c[0], " s/FLOP is not positive");
    }
    if (c[1] < 0) {
      return absl::StrCat(half_name, " ", c[1] / c[0], " is negative");
    }
    *flops_per_second = 1.0 / c[0];
    *half = c[1] / c[0];
    return "";
  };
}

// time = latency + bus_bytes / bandwidth fitted as [latency, 1/bandwidth].
ApplyFn ApplyAlphaBeta(double* latency_seconds, double* bus_bytes_per_second) {
  return [=](const std::vector<double>& c) -> std::string {
    if (c[0] < 0) return absl::StrCat("latency ", c[0], " s is negative");
    if (c[1] <= 0) {
      return absl::StrCat("1/bandwidth = ", c[1], " s/B is not positive");
    }
    *latency_seconds = c[0];
    *bus_bytes_per_second = 1.0 / c[1];
    return "";
  };
}

// Bus bytes of a collective sample, as CommModel counts them (for the
// reduce-scatter and all-gather `bytes` is the whole buffer, as for the
// all-reduce).
double BusBytes(const ProfileSample& sample) {
  const double n = sample.group_size;
  const double factor = sample.op == ProfileSample::Op::kAllReduce ? 2.0 : 1.0;
  return factor * sample.bytes * (n - 1) / n;
}
}  // namespace dcp
