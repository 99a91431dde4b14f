#ifndef DCP_PLANNER_BEST_STATIC_H_
#define DCP_PLANNER_BEST_STATIC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cost_model/cost_model.h"
#include "planner/strategies/baselines.h"

namespace dcp {

/// One static training setting: `bucket` or `packed` at one SP size.
struct StaticSetting {
  /// "bucket" or "packed".
  std::string kind;
  /// workload_max_length_tokens, micro_batch_sequences and sp_size (> 0).
  StaticOptions options;
  /// Mean predicted step time over the batches it was priced on.
  double mean_step_seconds = 0;

  /// "packed SP 8".
  std::string Describe() const;
};

/// The static setting a user tuning one by hand would end at: every legal
/// SP size (LegalSpSizes of `sp_sizes`) on which the workload's longest
/// sequence fits, with `bucket` and with `packed`, each priced by the cost
/// model on every batch of `batches` (one setting for the whole run, as
/// static training has); the one with the least mean step time, ties to
/// the smaller SP and then to bucket. `base` gives the workload maximum and
/// bucket's sequences per micro-batch; its sp_size is ignored.
/// RESOURCE_EXHAUSTED when no size holds the longest sequence,
/// INVALID_ARGUMENT for no batches.
absl::StatusOr<StaticSetting> FindBestStaticSetting(
    const CostModel& cost_model, const std::vector<int>& sp_sizes,
    const std::vector<std::vector<int64_t>>& batches,
    const StaticOptions& base);

/// The setting's plan of one batch.
absl::StatusOr<Plan> PlanStaticSetting(
    const CostModel& cost_model, const StaticSetting& setting,
    absl::Span<const int64_t> lengths_tokens);

}  // namespace dcp

#endif  // DCP_PLANNER_BEST_STATIC_H_
