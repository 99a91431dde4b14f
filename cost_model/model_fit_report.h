// How the fit of one sub-model of the cost model went.

#ifndef DCP_COST_MODEL_MODEL_FIT_REPORT_H_
#define DCP_COST_MODEL_MODEL_FIT_REPORT_H_

#include <string>

#include "common/struct_fields.h"

namespace dcp {

/// How one sub-model's fit went.
struct ModelFitReport {
  /// "gemm", "attention_forward", "attention_backward", "all_to_all_intra",
  /// "all_to_all_inter", "all_reduce_intra", "all_reduce_inter",
  /// "activation_memory", "reduce_scatter_intra", "reduce_scatter_inter",
  /// "all_gather_intra", "all_gather_inter", "micro_batch",
  /// "optimizer_step", "sp_micro_batch".
  std::string name;
  /// Samples of this sub-model that were given.
  int num_samples = 0;
  /// Relative error of the fitted sub-model against its samples' measured
  /// values (0 when the defaults were kept).
  double rms_relative_error = 0;
  double max_relative_error = 0;
  /// Leave-one-out error: each sample predicted by the fit of the others
  /// (rms over `held_out_samples`; 0 samples when not computed).
  double held_out_rms_relative_error = 0;
  int held_out_samples = 0;
  /// True when the defaults were kept; `note` says why.
  bool used_defaults = true;
  std::string note;
};

/// Every member of ModelFitReport by its name: the field of
/// dcp.v1.FitReport that carries it (common/struct_fields.h).
inline constexpr StructField<ModelFitReport> kModelFitReportFields[] = {
    {"name", &ModelFitReport::name},
    {"rms_relative_error", &ModelFitReport::rms_relative_error},
    {"max_relative_error", &ModelFitReport::max_relative_error},
    {"num_samples", &ModelFitReport::num_samples},
    {"used_defaults", &ModelFitReport::used_defaults},
    {"note", &ModelFitReport::note},
    {"held_out_rms_relative_error",
     &ModelFitReport::held_out_rms_relative_error},
    {"held_out_samples", &ModelFitReport::held_out_samples},
};

}  // namespace dcp

#endif  // DCP_COST_MODEL_MODEL_FIT_REPORT_H_
