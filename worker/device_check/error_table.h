// The device check's result table: for each micro-batch it ran, the cost
// model's predicted seconds and peak bytes beside the measured ones, their
// relative errors, and the median and worst error over the rows. Pure: no
// LibTorch.

#ifndef DCP_WORKER_DEVICE_CHECK_ERROR_TABLE_H_
#define DCP_WORKER_DEVICE_CHECK_ERROR_TABLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dcp {

/// One micro-batch of the device check: what the cost model predicted and
/// what the device measured. Plain value.
struct CheckRow {
  /// The model's name (e.g. "llama3-8b") and the layers it ran with.
  std::string model;
  int num_layers = 0;
  /// Tokens of the micro-batch's one sequence.
  int64_t tokens = 0;
  /// Layers recomputed in backward.
  int checkpointed_layers = 0;
  double predicted_seconds = 0;
  /// Forward + backward (recompute included), the median of the repeats.
  double measured_seconds = 0;
  double predicted_peak_bytes = 0;
  /// The allocator's peak over the micro-batch (everything the process
  /// holds); nullopt where nothing measures it.
  std::optional<double> measured_peak_bytes;
};

/// |predicted - measured| / measured; nullopt unless measured > 0.
std::optional<double> RelativeError(double predicted, double measured);

/// The median (nearest rank: the ceil(n / 2)-th smallest, as
/// common/percentile.h) and the largest of a set of relative errors.
struct ErrorSummary {
  int count = 0;
  double median = 0;
  double worst = 0;
};

/// Summary of `errors`; count 0 (and zeros) when empty.
ErrorSummary SummarizeErrors(const std::vector<double>& errors);

/// The table as Markdown, one row per CheckRow in order:
///
///   | model | layers | tokens | recomputed layers | predicted s |
///   measured s | time error | predicted peak bytes | measured peak bytes |
///   peak error |
///
/// seconds with 6 significant digits, bytes as integers, errors in percent
/// with 2 decimals ("n/a" where the peak was not measured), then two lines
///
///   time error over N rows: median X%, worst Y% (MODEL, T tokens, K
///   recomputed) peak error over M rows: median X%, worst Y% (...)
///
/// ("no rows" where there are none). The errors are computed from the
/// printed (rounded) values, so a reader can check them from the table.
std::string FormatErrorTable(const std::vector<CheckRow>& rows);

/// The rows as tab-separated values with a header line (full precision),
/// for scripts.
std::string FormatErrorTableTsv(const std::vector<CheckRow>& rows);

}  // namespace dcp

#endif  // DCP_WORKER_DEVICE_CHECK_ERROR_TABLE_H_
