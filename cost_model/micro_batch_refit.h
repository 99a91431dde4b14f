// Online least squares of the micro-batch model from measured micro-batches.
//
// The model of micro_batch_fit.h, measured = s * work + a + b * passes +
// c * sequences * passes, refitted from the micro-batches the workers
// report step after step: each row (work, 1, passes, sequences * passes)
// divided by its measured seconds (relative error) is added to running
// normal-equation sums, so a report can be taken back (a rank reporting a
// step again) and memory does not grow with the run. Fed by the planner's
// online refit (planner/service/step_stats_tracker.h), which prefers it
// to its single compute factor when it explains the window's
// micro-batches clearly better.

#ifndef DCP_COST_MODEL_MICRO_BATCH_REFIT_H_
#define DCP_COST_MODEL_MICRO_BATCH_REFIT_H_

#include <array>
#include <cstdint>
#include <optional>

namespace dcp {

/// Running sums of the relative-error least squares of the micro-batch
/// model. Pure value type; thread-compatible.
class MicroBatchRefit {
 public:
  static constexpr int kColumns = 4;
  /// Rows needed before a fit is given (twice the unknowns).
  static constexpr int kMinRows = 2 * kColumns;
  /// {work (op-level seconds), 1, passes, sequences * passes}.
  using Row = std::array<double, kColumns>;
  /// {rate scale s, per micro-batch a, per layer pass b, per sequence and
  /// layer pass c}.
  using Coefficients = std::array<double, kColumns>;

  /// A row with a finite positive measurement and finite non-negative
  /// columns; false (not counted) otherwise.
  bool Add(const Row& row, double measured_seconds);
  /// Takes back a row added before (same values).
  void Remove(const Row& row, double measured_seconds);
  int64_t count() const { return count_; }

  /// The fit, or nullopt with fewer than kMinRows rows, rows that cannot
  /// tell the columns apart, or a rate scale that is not positive. A fixed
  /// term that comes out negative is held at 0 and the rest refitted (the
  /// most negative first).
  std::optional<Coefficients> Solve() const;

  /// s * work + a + b * passes + c * sequences * passes.
  static double Predict(const Row& row, const Coefficients& c);

 private:
  // Normal equations: sum over rows of x x^T and of x, x = row / measured.
  std::array<std::array<double, kColumns>, kColumns> xx_{};
  std::array<double, kColumns> x1_{};
  int64_t count_ = 0;
};

}  // namespace dcp

#endif  // DCP_COST_MODEL_MICRO_BATCH_REFIT_H_
