#include "planner/cli/cli_plan_file.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "cost_model/cost_model.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"
#include "planner/plan/plan_json.h"
#include "planner/simulate/plan_price.h"
#include "planner/simulate/timeline.h"
#include "planner/simulate/timeline_svg.h"
#include "planner/plan/validate.h"
#include "planner/workload/workload.h"

namespace dcp {
namespace cli {
namespace {

// What `validate` and `price` read: the model and cluster, --lengths and
// the --plan file, parsed (not yet checked).
struct PlanFile {
  CostModel cost_model;
  std::vector<int64_t> lengths_tokens;
  Plan plan;
  /// The file's text (for CheckDerivedFields).
  std::string text;
  /// Set for a plan with "phases" (`plan` is then empty).
  std::optional<PhasedPlan> phased;
};

// Reads them; on failure prints why (a usage error for missing or
// unreadable inputs, "plan is invalid: ..." for a file that is not a plan)
// and returns nullopt with the exit code in `exit_code`.
std::optional<PlanFile> ReadPlanFile(const ParsedFlags& flags, Command& command,
                                     int& exit_code) {
  for (const char* required : {"plan", "lengths"}) {
    if (!flags.Given(required)) {
      exit_code =
          command.UsageError(absl::StrCat("--", required, "=FILE is required"));
      return std::nullopt;
    }
  }
  absl::StatusOr<CostModel> cost_model = LoadCostModel(flags);
  if (!cost_model.ok()) {
    exit_code = command.UsageError(cost_model.status().message());
    return std::nullopt;
  }
  absl::StatusOr<std::vector<int64_t>> lengths_tokens =
      ReadLengthsFile(flags.String("lengths"));
  if (!lengths_tokens.ok()) {
    exit_code = command.UsageError(lengths_tokens.status().message());
    return std::nullopt;
  }
  absl::StatusOr<std::string> plan_text = flags.FileContents("plan");
  if (!plan_text.ok()) {
    exit_code = command.UsageError(plan_text.status().message());
    return std::nullopt;
  }
  auto not_a_plan = [&](const absl::Status& status) {
    command.out() << "plan is invalid: " << flags.String("plan") << ": "
                  << status.message() << "\n";
    exit_code = kExitFailure;
    return std::nullopt;
  };
  if (PlanJsonHasPhases(*plan_text)) {
    absl::StatusOr<PhasedPlan> phased = PhasedPlanFromJson(*plan_text);
    if (!phased.ok()) return not_a_plan(phased.status());
    return PlanFile{*std::move(cost_model), *std::move(lengths_tokens), Plan(),
                    *std::move(plan_text), *std::move(phased)};
  }
  absl::StatusOr<Plan> plan = PlanFromJson(*plan_text);
  if (!plan.ok()) return not_a_plan(plan.status());
  return PlanFile{*std::move(cost_model), *std::move(lengths_tokens),
                  *std::move(plan), *std::move(plan_text), std::nullopt};
}

// ReadPlanFile, then ValidatePlan and CheckDerivedFields: the checks of
// `validate` and `price`. An invalid plan prints "plan is invalid: ..." and
// gives kExitFailure in `exit_code`.
std::optional<PlanFile> ReadValidPlanFile(const ParsedFlags& flags,
                                          Command& command, int& exit_code) {
  std::optional<PlanFile> file = ReadPlanFile(flags, command, exit_code);
  if (!file.has_value()) return std::nullopt;
  absl::Status status;
  if (file->phased.has_value()) {
    status = ValidatePhasedPlan(file->cost_model, file->lengths_tokens,
                                *file->phased);
    if (status.ok()) {
      status = CheckPhasedDerivedFields(file->text, file->lengths_tokens,
                                        file->cost_model);
    }
  } else {
    status = ValidatePlan(file->cost_model, file->lengths_tokens, file->plan);
    if (status.ok()) {
      status = CheckDerivedFields(file->text, file->lengths_tokens,
                                  file->cost_model);
    }
  }
  if (!status.ok()) {
    command.out() << "plan is invalid: "
                  << absl::StripPrefix(status.message(), "invalid plan: ")
                  << "\n";
    exit_code = kExitFailure;
    return std::nullopt;
  }
  return file;
}

// What `dcp validate` says of a valid plan after its groups: its sequences,
// micro-batches, peak memory and predicted step.
std::string ValidPlanTail(const CostModel& cost_model, size_t sequences,
                          int micro_batches, double peak_bytes,
                          double step_seconds) {
  return absl::StrFormat(
      "%d sequence(s) in %d micro-batch(es), max memory %.1f%% of the %.1f "
      "GiB budget, predicted step %.3f s\n",
      sequences, micro_batches,
      100 * peak_bytes / cost_model.MemoryBudgetBytes(),
      cost_model.MemoryBudgetBytes() / kGiB, step_seconds);
}

}  // namespace

int RunValidate(const ParsedFlags& flags, Command& command) {
  int exit_code = kExitOk;
  std::optional<PlanFile> file = ReadValidPlanFile(flags, command, exit_code);
  if (!file.has_value()) return exit_code;
  const CostModel& cost_model = file->cost_model;
  const std::vector<int64_t>& lengths_tokens = file->lengths_tokens;
  if (file->phased.has_value()) {
    // Valid, so the indices are safe to predict from.
    PhasedPlan predicted = *file->phased;
    PredictPhasedPlan(cost_model, lengths_tokens, predicted);
    int groups = 0;
    int micro_batches = 0;
    for (const Plan& phase : predicted.phases) {
      groups += static_cast<int>(phase.groups.size());
      micro_batches += MicroBatchCount(phase);
    }
    command.out() << absl::StrFormat(
                         "plan is valid: %d phase(s) of %d SP group(s) in all "
                         "over %d GPUs, ",
                         predicted.phases.size(), groups,
                         cost_model.cluster().NumGpus())
                  << ValidPlanTail(cost_model, lengths_tokens.size(),
                                   micro_batches, MaxPeakBytes(predicted),
                                   predicted.predicted_step_seconds);
    return kExitOk;
  }
  // Valid, so the indices are safe to predict from.
  Plan predicted = file->plan;
  PredictPlan(cost_model, lengths_tokens, predicted);
  command.out() << absl::StrFormat(
                       "plan is valid: %d SP group(s) over %d GPUs, ",
                       predicted.groups.size(), cost_model.cluster().NumGpus())
                << ValidPlanTail(cost_model, lengths_tokens.size(),
                                 MicroBatchCount(predicted),
                                 MaxPeakBytes(predicted),
                                 predicted.predicted_step_seconds);
  return kExitOk;
}

int RunPrice(const ParsedFlags& flags, Command& command) {
  absl::StatusOr<std::string> format =
      flags.Choice("format", {"table", "json", "svg"});
  if (!format.ok()) return command.UsageError(format.status().message());
  absl::StatusOr<std::vector<int>> sp_sizes = SpSizes(flags);
  if (!sp_sizes.ok()) return command.UsageError(sp_sizes.status().message());
  int exit_code = kExitOk;
  std::optional<PlanFile> file = ReadValidPlanFile(flags, command, exit_code);
  if (!file.has_value()) return exit_code;
  if (file->phased.has_value()) {
    if (*format == "svg") {
      return command.UsageError(
          "--format=svg draws plans of one layout; this plan has phases: use "
          "--format=table or --format=json");
    }
    absl::StatusOr<PhasedPlanPrice> price = PricePhasedPlan(
        file->cost_model, file->lengths_tokens, *file->phased, *sp_sizes);
    if (!price.ok()) return command.Failure(price.status().message());
    command.out() << (*format == "json" ? PhasedPlanPriceToJson(*price) + "\n"
                                        : PhasedPlanPriceToTable(*price));
    return kExitOk;
  }
  absl::StatusOr<PlanPrice> price =
      PricePlan(file->cost_model, file->lengths_tokens, file->plan, *sp_sizes);
  if (!price.ok()) return command.Failure(price.status().message());
  if (*format == "json") {
    command.out() << PlanPriceToJson(*price) << "\n";
  } else if (*format == "svg") {
    absl::StatusOr<Timeline> timeline =
        BuildTimeline(file->cost_model, file->lengths_tokens, price->plan);
    if (!timeline.ok()) return command.Failure(timeline.status().message());
    command.out() << RenderTimelineSvg(*timeline);
  } else {
    command.out() << PlanPriceToTable(*price);
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace dcp
