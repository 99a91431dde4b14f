#include "worker/run_summary.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "nlohmann/json.hpp"
#include "worker/json_field.h"
#include "worker/status_context.h"

namespace dcp {
namespace {

using nlohmann::json;

/// The smallest and largest checkpointed-layer count of `group`'s
/// micro-batches ({0, 0} for none).
std::pair<int, int> RecomputeRange(const GroupPlan& group) {
  int low = 0;
  int high = 0;
  for (size_t m = 0; m < group.micro_batches.size(); ++m) {
    const int layers = group.micro_batches[m].checkpointed_layers;
    low = m == 0 ? layers : std::min(low, layers);
    high = m == 0 ? layers : std::max(high, layers);
  }
  return {low, high};
}

template <typename Field>
double MeanOf(const std::vector<StepRecord>& steps, size_t from, Field field) {
  double sum = 0;
  size_t count = 0;
  for (size_t i = from; i < steps.size(); ++i) {
    sum += field(steps[i]);
    ++count;
  }
  return count > 0 ? sum / static_cast<double>(count) : 0;
}

json StepToJson(const StepRecord& record) {
  json recompute = json::array();
  for (const auto& [low, high] : record.recompute) {
    recompute.push_back({low, high});
  }
  return {{"step", record.step},
          {"plan", record.plan_shape},
          {"sp_sizes", record.sp_sizes},
          {"micro_batches", record.micro_batches},
          {"recompute", recompute},
          {"predicted_seconds", record.predicted_seconds},
          {"measured_seconds", record.measured_seconds},
          {"loss", record.loss},
          {"params_version", record.params_version}};
}

StepRecord StepFromJson(const json& object) {
  StepRecord record;
  record.step = JsonField<int64_t>(object, "step");
  record.plan_shape = JsonField<std::string>(object, "plan");
  record.sp_sizes = JsonField<std::vector<int>>(object, "sp_sizes");
  record.micro_batches = JsonField<std::vector<int>>(object, "micro_batches");
  for (const json& range : JsonField<json>(object, "recompute")) {
    record.recompute.emplace_back(range.at(0).get<int>(),
                                  range.at(1).get<int>());
  }
  record.predicted_seconds = JsonField<double>(object, "predicted_seconds");
  record.measured_seconds = JsonField<double>(object, "measured_seconds");
  record.loss = JsonField<double>(object, "loss");
  record.params_version = JsonField<int64_t>(object, "params_version");
  return record;
}

}  // namespace

std::string PlanShape(const Plan& plan) {
  std::vector<std::string> sp;
  std::vector<std::string> micro_batches;
  std::vector<std::string> recompute;
  for (const GroupPlan& group : plan.groups) {
    sp.push_back(absl::StrCat(group.sp_size()));
    micro_batches.push_back(absl::StrCat(group.micro_batches.size()));
    const auto [low, high] = RecomputeRange(group);
    recompute.push_back(low == high ? absl::StrCat(low)
                                    : absl::StrCat(low, "-", high));
  }
  return absl::StrCat("SP[", absl::StrJoin(sp, ","), "] mb[",
                      absl::StrJoin(micro_batches, ","), "] recompute[",
                      absl::StrJoin(recompute, ","), "]");
}

StepRecord StepRecordOfPlan(const Plan& plan, int64_t step) {
  StepRecord record;
  record.step = step;
  for (const GroupPlan& group : plan.groups) {
    record.sp_sizes.push_back(group.sp_size());
    record.micro_batches.push_back(
        static_cast<int>(group.micro_batches.size()));
    record.recompute.push_back(RecomputeRange(group));
  }
  record.plan_shape = PlanShape(plan);
  record.predicted_seconds = plan.predicted_step_seconds;
  return record;
}

std::string PhasedPlanShape(const PhasedPlan& plan) {
  std::vector<std::string> phases;
  for (const Plan& phase : plan.phases) phases.push_back(PlanShape(phase));
  return absl::StrCat("phases ", plan.phases.size(), ": ",
                      absl::StrJoin(phases, " then "));
}

StepRecord StepRecordOfPhasedPlan(const PhasedPlan& plan, int64_t step) {
  StepRecord record;
  record.step = step;
  for (const Plan& phase : plan.phases) {
    const StepRecord of_phase = StepRecordOfPlan(phase, step);
    record.sp_sizes.insert(record.sp_sizes.end(), of_phase.sp_sizes.begin(),
                           of_phase.sp_sizes.end());
    record.micro_batches.insert(record.micro_batches.end(),
                                of_phase.micro_batches.begin(),
                                of_phase.micro_batches.end());
    record.recompute.insert(record.recompute.end(), of_phase.recompute.begin(),
                            of_phase.recompute.end());
  }
  record.plan_shape = PhasedPlanShape(plan);
  record.predicted_seconds = plan.predicted_step_seconds;
  return record;
}

double RunSummary::MeanMeasuredSeconds(size_t from) const {
  return MeanOf(steps, from,
                [](const StepRecord& step) { return step.measured_seconds; });
}

double RunSummary::MeanPredictedSeconds(size_t from) const {
  return MeanOf(steps, from,
                [](const StepRecord& step) { return step.predicted_seconds; });
}

double RunSummary::MeanRelativeError(size_t from) const {
  double sum = 0;
  size_t count = 0;
  for (size_t i = from; i < steps.size(); ++i) {
    const double measured = steps[i].measured_seconds;
    if (measured > 0) {
      sum += std::abs(steps[i].predicted_seconds - measured) / measured;
      ++count;
    }
  }
  return count > 0 ? sum / static_cast<double>(count) : 0;
}

double RunSummary::MedianRelativeError(size_t from, size_t to) const {
  std::vector<double> errors;
  for (size_t i = from; i < std::min(to, steps.size()); ++i) {
    const double measured = steps[i].measured_seconds;
    if (measured > 0) {
      errors.push_back(std::abs(steps[i].predicted_seconds - measured) /
                       measured);
    }
  }
  if (errors.empty()) return 0;
  std::sort(errors.begin(), errors.end());
  const size_t middle = errors.size() / 2;
  return errors.size() % 2 == 1 ? errors[middle]
                                : (errors[middle - 1] + errors[middle]) / 2;
}

absl::Status WriteRunSummary(const std::string& path,
                             const RunSummary& summary) {
  json steps = json::array();
  for (const StepRecord& record : summary.steps) {
    steps.push_back(StepToJson(record));
  }
  const json document = {
      {"plan_source", summary.plan_source},
      {"model", summary.model},
      {"world_size", summary.world_size},
      {"workload", summary.workload},
      {"workload_seed", summary.workload_seed},
      {"first_step", summary.first_step},
      {"next_step", summary.next_step},
      {"steps_requested", summary.steps_requested},
      {"stopped_on_request", summary.stopped_on_request},
      {"mean_measured_seconds", summary.MeanMeasuredSeconds()},
      {"mean_predicted_seconds", summary.MeanPredictedSeconds()},
      {"mean_relative_error", summary.MeanRelativeError()},
      {"steps", steps}};
  return WithContext(WriteFileAtomically(path, document.dump(2) + "\n"),
                     "writing the run summary");
}

absl::StatusOr<RunSummary> ReadRunSummary(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("there is no run summary at ", path));
  }
  RunSummary summary;
  try {
    json document;
    file >> document;
    summary.plan_source = JsonField<std::string>(document, "plan_source");
    summary.model = JsonField<std::string>(document, "model");
    summary.world_size = JsonField<int>(document, "world_size");
    summary.workload = JsonField<std::string>(document, "workload");
    summary.workload_seed = JsonField<uint64_t>(document, "workload_seed");
    summary.first_step = JsonField<int64_t>(document, "first_step");
    summary.next_step = JsonField<int64_t>(document, "next_step");
    summary.steps_requested = JsonField<int64_t>(document, "steps_requested");
    summary.stopped_on_request =
        JsonField<bool>(document, "stopped_on_request");
    for (const json& step : JsonField<json>(document, "steps")) {
      summary.steps.push_back(StepFromJson(step));
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(
        "the run summary at ", path, " is not one WriteRunSummary wrote (",
        e.what(), "); delete it and run again"));
  }
  return summary;
}

}  // namespace dcp
