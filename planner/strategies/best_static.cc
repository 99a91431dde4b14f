#include "planner/strategies/best_static.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/plan.h"

namespace dcp {

std::string StaticSetting::Describe() const {
  return absl::StrCat(kind, " SP ", options.sp_size);
}

absl::StatusOr<Plan> PlanStaticSetting(
    const CostModel& cost_model, const StaticSetting& setting,
    absl::Span<const int64_t> lengths_tokens) {
  if (setting.kind == "bucket") {
    return PlanBucket(cost_model, lengths_tokens, setting.options);
  }
  if (setting.kind == "packed") {
    return PlanPacked(cost_model, lengths_tokens, setting.options);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "static setting kind '", setting.kind, "'; use bucket or packed"));
}

absl::StatusOr<StaticSetting> FindBestStaticSetting(
    const CostModel& cost_model, const std::vector<int>& sp_sizes,
    const std::vector<std::vector<int64_t>>& batches,
    const StaticOptions& base) {
  if (batches.empty()) {
    return absl::InvalidArgumentError(
        "no batches to price the static settings on");
  }
  absl::StatusOr<std::vector<int>> sizes = LegalSpSizes(cost_model, sp_sizes);
  if (!sizes.ok()) return sizes.status();
  StaticOptions options = base;
  for (const std::vector<int64_t>& batch : batches) {
    if (!batch.empty()) {
      options.workload_max_length_tokens =
          std::max(options.workload_max_length_tokens,
                   *std::max_element(batch.begin(), batch.end()));
    }
  }
  std::vector<StaticSetting> settings;
  std::vector<std::string> refused;
  absl::Status size_error;
  for (int sp_size : *sizes) {
    options.sp_size = sp_size;
    // A size that cannot hold the longest sequence is no static setting.
    absl::StatusOr<StaticConfig> config =
        ChooseStaticConfig(cost_model, options, batches.front());
    if (!config.ok()) {
      // Smaller sizes fail for the same sequence; the largest size's
      // reason is the one that says what would help.
      size_error = config.status();
      continue;
    }
    for (const char* kind : {"bucket", "packed"}) {
      StaticSetting setting{kind, options, 0};
      double sum_seconds = 0;
      absl::Status failed;
      for (const std::vector<int64_t>& batch : batches) {
        absl::StatusOr<Plan> plan =
            PlanStaticSetting(cost_model, setting, batch);
        if (!plan.ok()) {
          failed = plan.status();
          break;
        }
        PredictPlan(cost_model, batch, *plan);
        sum_seconds += plan->predicted_step_seconds;
      }
      if (!failed.ok()) {
        refused.push_back(
            absl::StrCat(setting.Describe(), ": ", failed.message()));
        continue;
      }
      setting.mean_step_seconds = sum_seconds / batches.size();
      settings.push_back(std::move(setting));
    }
  }
  if (settings.empty()) {
    if (refused.empty()) {
      return absl::Status(
          size_error.code() == absl::StatusCode::kInvalidArgument
              ? absl::StatusCode::kResourceExhausted
              : size_error.code(),
          absl::StrCat("no static SP size holds the workload: ",
                       size_error.message()));
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "no static setting plans every batch: ", absl::StrJoin(refused, "; ")));
  }
  // Sizes ascend and bucket comes first, so a strict < keeps the tie rule.
  const StaticSetting* best = &settings.front();
  for (const StaticSetting& setting : settings) {
    if (setting.mean_step_seconds < best->mean_step_seconds) best = &setting;
  }
  return *best;
}

}  // namespace dcp
