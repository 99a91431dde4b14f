#include "planner/strategies/cap_tuning.h"

#include <algorithm>
#include <optional>
#include <string>
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

std::vector<int64_t> CapGrid(int64_t capacity, bool with_capacity) {
  std::vector<int64_t> caps;
  for (int64_t power = 512; power <= capacity; power *= 2) {
    caps.push_back(power);
    if (power + power / 2 <= capacity) caps.push_back(power + power / 2);
  }
  if (with_capacity && capacity >= 1 &&
      (caps.empty() || caps.back() != capacity)) {
    caps.push_back(capacity);
  }
  std::sort(caps.begin(), caps.end());
  return caps;
}

absl::StatusOr<TunedCap> TuneCap(
    const std::vector<int64_t>& caps,
    const std::function<absl::StatusOr<CapOutcome>(int64_t)>& price,
    absl::string_view name) {
  std::optional<TunedCap> best;
  std::string last_error = "no cap between 512 tokens and what a rank holds";
  for (const int64_t cap : caps) {
    absl::StatusOr<CapOutcome> outcome = price(cap);
    if (!outcome.ok()) {
      last_error = std::string(outcome.status().message());
      continue;
    }
    if (!best || outcome->mean_step_seconds < best->outcome.mean_step_seconds) {
      best = TunedCap{cap, *outcome};
    }
  }
  if (!best) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name, ": no per-rank token cap schedules every batch: ", last_error));
  }
  return *best;
}

}  // namespace dcp
