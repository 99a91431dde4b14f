#include "cost_model/least_squares.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace dcp {
namespace {

// A column j is declared linearly dependent on columns 0..j-1 when the part
// of it orthogonal to them is smaller than this fraction of its norm.
constexpr double kRankTolerance = 1e-10;

// Euclidean norm of x[begin, end) computed without overflow/underflow.
double StableNorm(const std::vector<double>& x, size_t begin, size_t end) {
  double scale = 0;
  for (size_t i = begin; i < end; ++i) scale = std::max(scale, std::abs(x[i]));
  if (scale == 0) return 0;
  double sum = 0;
  for (size_t i = begin; i < end; ++i) {
    const double v = x[i] / scale;
    sum += v * v;
  }
  return scale * std::sqrt(sum);
}

absl::Status ValidateInputs(const std::vector<std::vector<double>>& rows,
                            const std::vector<double>& targets,
                            const LeastSquaresOptions& options) {
  if (rows.empty()) {
    return absl::InvalidArgumentError(
        "FitLeastSquares: no rows given; provide at least as many samples as "
        "coefficients");
  }
  if (targets.size() != rows.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FitLeastSquares: ", rows.size(), " rows but ", targets.size(),
        " targets; provide exactly one target per row"));
  }
  const size_t num_cols = rows[0].size();
  if (num_cols == 0) {
    return absl::InvalidArgumentError(
        "FitLeastSquares: row 0 has no columns; each row needs one value per "
        "coefficient");
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].size() != num_cols) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FitLeastSquares: row ", i, " has ", rows[i].size(),
          " columns but row 0 has ", num_cols,
          "; all rows must have the same number of columns"));
    }
  }
  if (rows.size() < num_cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FitLeastSquares: ", rows.size(), " rows for ", num_cols,
        " columns; need at least as many rows (samples) as columns "
        "(coefficients)"));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = 0; j < num_cols; ++j) {
      if (!std::isfinite(rows[i][j])) {
        return absl::InvalidArgumentError(
            absl::StrCat("FitLeastSquares: rows[", i, "][", j, "] = ",
                         rows[i][j], " is not finite; remove or fix the sample"));
      }
    }
    if (!std::isfinite(targets[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("FitLeastSquares: targets[", i, "] = ", targets[i],
                       " is not finite; remove or fix the sample"));
    }
    if (options.relative_error && targets[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FitLeastSquares: targets[", i, "] = ", targets[i],
          " but relative-error fitting needs every target > 0; remove the "
          "sample or set relative_error = false"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LeastSquaresFit> FitLeastSquares(
    const std::vector<std::vector<double>>& rows,
    const std::vector<double>& targets, const LeastSquaresOptions& options) {
  if (absl::Status s = ValidateInputs(rows, targets, options); !s.ok()) {
    return s;
  }
  const size_t m = rows.size();
  const size_t n = rows[0].size();

  // Weighted system: row i scaled by sqrt(w_i) = 1/y_i in relative mode.
  // a is stored column-major: a[j * m + i].
  std::vector<double> a(m * n);
  std::vector<double> b(m);
  for (size_t i = 0; i < m; ++i) {
    const double row_scale = options.relative_error ? 1.0 / targets[i] : 1.0;
    for (size_t j = 0; j < n; ++j) a[j * m + i] = rows[i][j] * row_scale;
    b[i] = targets[i] * row_scale;
  }

  // Column scaling: each column to unit max-abs. x_j = z_j / col_scale[j].
  std::vector<double> col_scale(n);
  std::vector<double> col_norm(n);
  for (size_t j = 0; j < n; ++j) {
    double max_abs = 0;
    for (size_t i = 0; i < m; ++i) {
      max_abs = std::max(max_abs, std::abs(a[j * m + i]));
    }
    if (max_abs == 0 || !std::isfinite(max_abs)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "FitLeastSquares: column ", j,
          " is all zero (or not representable after weighting), so its "
          "coefficient is undetermined; drop the column or add samples where "
          "it is non-zero"));
    }
    col_scale[j] = 1.0 / max_abs;
    for (size_t i = 0; i < m; ++i) a[j * m + i] *= col_scale[j];
    col_norm[j] = StableNorm(a, j * m, (j + 1) * m);
  }

  // Householder QR without pivoting, so that the first column found to be
  // dependent on earlier ones is the one reported.
  std::vector<double> r_diag(n);
  std::vector<double> v(m);
  for (size_t k = 0; k < n; ++k) {
    double* col = &a[k * m];
    const double norm = StableNorm(a, k * m + k, (k + 1) * m);
    if (norm <= kRankTolerance * col_norm[k]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "FitLeastSquares: column ", k,
          " is (numerically) a linear combination of columns 0..",
          k == 0 ? 0 : k - 1,
          ", so the coefficients are not unique; drop or change that feature "
          "or add samples that vary it independently"));
    }
    const double alpha = col[k] > 0 ? -norm : norm;
    // v = x - alpha e1, H = I - 2 v v^T / (v^T v).
    for (size_t i = k; i < m; ++i) v[i] = col[i];
    v[k] -= alpha;
    double vtv = 0;
    for (size_t i = k; i < m; ++i) vtv += v[i] * v[i];
    r_diag[k] = alpha;
    col[k] = alpha;
    for (size_t i = k + 1; i < m; ++i) col[i] = 0;
    if (vtv == 0) continue;
    for (size_t j = k + 1; j < n; ++j) {
      double* cj = &a[j * m];
      double dot = 0;
      for (size_t i = k; i < m; ++i) dot += v[i] * cj[i];
      const double f = 2 * dot / vtv;
      for (size_t i = k; i < m; ++i) cj[i] -= f * v[i];
    }
    double dot = 0;
    for (size_t i = k; i < m; ++i) dot += v[i] * b[i];
    const double f = 2 * dot / vtv;
    for (size_t i = k; i < m; ++i) b[i] -= f * v[i];
  }

  // Back substitution R z = Q^T b, then undo column scaling.
  std::vector<double> z(n);
  for (size_t kk = n; kk-- > 0;) {
    double s = b[kk];
    for (size_t j = kk + 1; j < n; ++j) s -= a[j * m + kk] * z[j];
    z[kk] = s / r_diag[kk];
  }

  LeastSquaresFit fit;
  fit.num_samples = static_cast<int>(m);
  fit.coefficients.resize(n);
  for (size_t j = 0; j < n; ++j) {
    fit.coefficients[j] = z[j] * col_scale[j];
    if (!std::isfinite(fit.coefficients[j])) {
      return absl::FailedPreconditionError(absl::StrCat(
          "FitLeastSquares: coefficient ", j,
          " overflowed; column ", j,
          " is too close to dependent on the others or badly scaled"));
    }
  }

  double sum_sq = 0;
  int counted = 0;
  for (size_t i = 0; i < m; ++i) {
    if (targets[i] == 0) continue;
    double pred = 0;
    for (size_t j = 0; j < n; ++j) pred += rows[i][j] * fit.coefficients[j];
    const double rel = std::abs((pred - targets[i]) / targets[i]);
    sum_sq += rel * rel;
    fit.max_relative_error = std::max(fit.max_relative_error, rel);
    ++counted;
  }
  if (counted > 0) fit.rms_relative_error = std::sqrt(sum_sq / counted);
  return fit;
}

}  // namespace dcp
