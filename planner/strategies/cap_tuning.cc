#include "planner/strategies/cap_tuning.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp {

absl::StatusOr<CapOutcome> PriceCapOverRun(
    const CostModel& cost_model,
    const std::vector<std::vector<int64_t>>& batches, int64_t cap,
    bool per_micro_batch,
    const std::function<absl::StatusOr<PhasedPlan>(absl::Span<const int64_t>)>&
        plan) {
  std::vector<PhasedPlan> plans;
  int layers = 0;
  for (const std::vector<int64_t>& batch : batches) {
    absl::StatusOr<PhasedPlan> planned = plan(batch);
    if (!planned.ok()) return planned.status();
    std::optional<int> fit = FewestCheckpointedLayersThatFit(
        cost_model, batch, *planned, /*set_each=*/per_micro_batch);
    if (!fit) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "at cap ", cap, " a micro-batch fits memory at no recompute"));
    }
    layers = std::max(layers, *fit);
    plans.push_back(*std::move(planned));
  }
  double sum_seconds = 0;
  for (size_t b = 0; b < plans.size(); ++b) {
    if (!per_micro_batch) SetCheckpointedLayers(plans[b], layers);
    PredictPhasedPlan(cost_model, batches[b], plans[b]);
    sum_seconds += plans[b].predicted_step_seconds;
  }
  CapOutcome outcome;
  outcome.checkpointed_layers = layers;
  outcome.mean_step_seconds = sum_seconds / static_cast<double>(batches.size());
  return outcome;
}

}  // namespace dcp
