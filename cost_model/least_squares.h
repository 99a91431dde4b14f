// Weighted linear least squares for fitting cost-model coefficients.
//
// Cost models in DCP are linear in a handful of features (FLOP counts, bytes
// moved, a constant overhead, ...) whose magnitudes differ by many orders of
// magnitude. FitLeastSquares solves the (optionally relative-error weighted)
// problem with column-scaled Householder QR, which stays accurate where the
// normal equations would lose all precision.

#ifndef DCP_COST_MODEL_LEAST_SQUARES_H_
#define DCP_COST_MODEL_LEAST_SQUARES_H_

#include <vector>

#include "absl/status/statusor.h"

namespace dcp {

/// Options for FitLeastSquares.
struct LeastSquaresOptions {
  /// When true, row i is weighted by 1/targets[i]^2 so that the fit minimises
  /// relative error (targets must be > 0). When false, all rows have weight 1
  /// and the fit minimises absolute error.
  bool relative_error = true;
};

/// Result of FitLeastSquares.
struct LeastSquaresFit {
  /// Fitted coefficients, one per column of the design matrix.
  std::vector<double> coefficients;
  /// sqrt(mean(((pred - y) / y)^2)) over the samples with y != 0 (0 if none).
  double rms_relative_error = 0;
  /// max(|pred - y| / |y|) over the samples with y != 0 (0 if none).
  double max_relative_error = 0;
  /// Number of rows (samples) used in the fit.
  int num_samples = 0;
};

/// Solves min_x sum_i w_i (rows[i] . x - targets[i])^2 with Householder QR
/// (each column is scaled to unit max-abs first, for conditioning).
/// w_i = 1/targets[i]^2 when options.relative_error, else 1.
///
/// Errors:
///  * InvalidArgument: no rows; a row with no columns; rows of different
///    lengths; targets.size() != rows.size(); fewer rows than columns;
///    non-finite values; relative mode with a target <= 0 (the message names
///    the row index and value).
///  * FailedPrecondition: the columns are (numerically) linearly dependent
///    (or a column is all zero); the message names the offending column.
absl::StatusOr<LeastSquaresFit> FitLeastSquares(
    const std::vector<std::vector<double>>& rows,
    const std::vector<double>& targets,
    const LeastSquaresOptions& options = {});

}  // namespace dcp

#endif  // DCP_COST_MODEL_LEAST_SQUARES_H_
