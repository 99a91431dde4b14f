// The fit of one sub-model of the cost model that is linear in its
// parameters: relative-error least squares over its samples, a physical
// check of the coefficients, and the report of how it went (errors on the
// samples and leave-one-out). Every op-level sub-model of FitCostModel
// (fitting.h) and the activation-memory fit go through it.

#ifndef DCP_COST_MODEL_SUB_MODEL_FIT_H_
#define DCP_COST_MODEL_SUB_MODEL_FIT_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "cost_model/model_fit_report.h"
#include "cost_model/profile_sample.h"

namespace dcp {

/// One sub-model's samples in linear form: measured[i] is predicted by
/// rows[i] . coefficients + offsets[i]. The three vectors have one entry per
/// sample; every measured value is positive. Plain value.
struct LinearProblem {
  std::vector<std::vector<double>> rows;
  std::vector<double> offsets;
  std::vector<double> measured;

  /// Appends one sample.
  void Add(std::vector<double> row, double offset, double measured_value) {
    rows.push_back(std::move(row));
    offsets.push_back(offset);
    measured.push_back(measured_value);
  }
  /// The number of samples.
  int size() const { return static_cast<int>(rows.size()); }
};

/// Checks fitted coefficients and, when physical, writes them into the
/// parameters; otherwise returns why not (and writes nothing).
using ApplyFn = std::function<std::string(const std::vector<double>&)>;

/// Fits `problem` minimising relative error against the measured values
/// (row i weighted by 1/measured[i]^2) and applies the coefficients with
/// `apply`. `secondary_column` (or -1) is a small additive term (an overhead
/// or a latency) that noise may push below zero; it may be held at zero
/// instead. With fewer than 2 * num_parameters samples, a failed solve or a
/// non-physical result nothing is applied and the report (named `name`)
/// says why.
ModelFitReport FitSubModel(std::string name, int num_parameters,
                           int secondary_column, const LinearProblem& problem,
                           const ApplyFn& apply);

/// time = flops/P * (1 + half/size) fitted as [1/P, half/P]: writes P into
/// `flops_per_second` and half into `half` (called `half_name` in messages).
ApplyFn ApplyRateCurve(double* flops_per_second, double* half,
                       absl::string_view half_name);

/// time = latency + bus_bytes / bandwidth fitted as [latency, 1/bandwidth].
ApplyFn ApplyAlphaBeta(double* latency_seconds, double* bus_bytes_per_second);

/// Bus bytes of a collective sample, as CommModel counts them (for the
/// reduce-scatter and all-gather `bytes` is the whole buffer, as for the
/// all-reduce).
double BusBytes(const ProfileSample& sample);

}  // namespace dcp

#endif  // DCP_COST_MODEL_SUB_MODEL_FIT_H_
