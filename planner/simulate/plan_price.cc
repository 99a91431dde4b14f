#include "planner/simulate/plan_price.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "planner/plan/batch_check.h"
#include "planner/search/lower_bound.h"
#include "planner/plan/plan_table.h"
#include "planner/plan/validate.h"

namespace dcp {
namespace {

// Each group of a priced plan (or phase); idle is to its slowest group.
std::vector<GroupPrice> GroupPrices(const Plan& priced, double budget) {
  std::vector<GroupPrice> prices;
  for (const GroupPlan& group : priced.groups) {
    GroupPrice entry;
    entry.ranks = group.ranks;
    entry.micro_batches = static_cast<int>(group.micro_batches.size());
    entry.seconds = group.predicted_seconds;
    entry.idle_seconds = priced.slowest_group_seconds - group.predicted_seconds;
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      entry.peak_memory_fraction =
          std::max(entry.peak_memory_fraction,
                   micro_batch.predicted_peak_bytes / budget);
    }
    prices.push_back(std::move(entry));
  }
  return prices;
}

nlohmann::ordered_json GroupPricesJson(const std::vector<GroupPrice>& prices) {
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const GroupPrice& group : prices) {
    groups.push_back({{"ranks", group.ranks},
                      {"sp_size", group.ranks.size()},
                      {"micro_batches", group.micro_batches},
                      {"seconds", group.seconds},
                      {"idle_seconds", group.idle_seconds},
                      {"peak_memory_fraction", group.peak_memory_fraction}});
  }
  return groups;
}

std::string GroupPricesTable(const std::vector<GroupPrice>& prices) {
  std::string table =
      absl::StrFormat("%-6s %-12s %4s %6s %10s %10s %8s\n", "group", "ranks",
                      "SP", "micro", "seconds", "idle (s)", "memory");
  for (size_t g = 0; g < prices.size(); ++g) {
    const GroupPrice& group = prices[g];
    absl::StrAppend(
        &table,
        absl::StrFormat("%-6d %-12s %4d %6d %10.3f %10.3f %7.1f%%\n", g,
                        DescribeRankList(group.ranks), group.ranks.size(),
                        group.micro_batches, group.seconds, group.idle_seconds,
                        100 * group.peak_memory_fraction));
  }
  return table;
}

// Validates `plan` (`validate`) and prices a copy of it (`predict`) into a
// PriceT (PlanPrice or PhasedPlanPrice) with the lower bound over the legal
// SP sizes of `sp_sizes`, the mean idle fraction and the peak memory
// fraction; the caller adds the groups.
template <typename PriceT, typename PlanT>
absl::StatusOr<PriceT> PriceStep(
    const CostModel& cost_model, absl::Span<const int64_t> lengths_tokens,
    const PlanT& plan, absl::Span<const int> sp_sizes,
    absl::Status (*validate)(const CostModel&, absl::Span<const int64_t>,
                             const PlanT&),
    void (*predict)(const CostModel&, absl::Span<const int64_t>, PlanT&)) {
  if (absl::Status status = validate(cost_model, lengths_tokens, plan);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<std::vector<int>> sizes = LegalSpSizes(cost_model, sp_sizes);
  if (!sizes.ok()) return sizes.status();
  absl::StatusOr<double> lower_bound =
      StepTimeLowerBound(cost_model, *sizes, lengths_tokens);
  if (!lower_bound.ok()) return lower_bound.status();

  PriceT price;
  price.plan = plan;
  predict(cost_model, lengths_tokens, price.plan);
  price.plan.lower_bound_seconds = *lower_bound;
  price.idle_fraction = MeanIdleFraction(price.plan);
  price.peak_memory_fraction =
      MaxPeakBytes(price.plan) / cost_model.MemoryBudgetBytes();
  return price;
}

}  // namespace

absl::StatusOr<PlanPrice> PricePlan(const CostModel& cost_model,
                                    absl::Span<const int64_t> lengths_tokens,
                                    const Plan& plan,
                                    absl::Span<const int> sp_sizes) {
  absl::StatusOr<PlanPrice> price = PriceStep<PlanPrice>(
      cost_model, lengths_tokens, plan, sp_sizes, ValidatePlan, PredictPlan);
  if (price.ok()) {
    price->groups = GroupPrices(price->plan, cost_model.MemoryBudgetBytes());
  }
  return price;
}

absl::StatusOr<PhasedPlanPrice> PricePhasedPlan(
    const CostModel& cost_model, absl::Span<const int64_t> lengths_tokens,
    const PhasedPlan& plan, absl::Span<const int> sp_sizes) {
  absl::StatusOr<PhasedPlanPrice> price =
      PriceStep<PhasedPlanPrice>(cost_model, lengths_tokens, plan, sp_sizes,
                                 ValidatePhasedPlan, PredictPhasedPlan);
  if (!price.ok()) return price;
  for (const Plan& phase : price->plan.phases) {
    price->phases.push_back(GroupPrices(phase, cost_model.MemoryBudgetBytes()));
  }
  return price;
}

namespace {

// The fields every priced step (PlanPrice or PhasedPlanPrice) starts with:
// `before_key` names the time before the step's end (the slowest group's, or
// the phases' sum).
template <typename PriceT>
nlohmann::ordered_json StepFields(const PriceT& price, const char* before_key,
                                  double before_seconds) {
  const double step_seconds = price.plan.predicted_step_seconds;
  const double exposed_allreduce_seconds = price.plan.exposed_allreduce_seconds;
  return {
      {"strategy", price.plan.strategy},
      {"step_seconds", step_seconds},
      {before_key, before_seconds},
      {"exposed_allreduce_seconds", exposed_allreduce_seconds},
      // The rest of the step: the optimizer step, after the all-reduce.
      {"optimizer_step_seconds",
       step_seconds - before_seconds - exposed_allreduce_seconds},
      {"lower_bound_seconds", price.plan.lower_bound_seconds},
      {"gap_to_lower_bound", price.plan.GapToLowerBound()},
      {"idle_fraction", price.idle_fraction},
      {"peak_memory_fraction", price.peak_memory_fraction},
  };
}

// The end of a priced step's first table line, from its lower bound on.
template <typename PriceT>
std::string BoundIdleAndMemoryLine(const PriceT& price) {
  return absl::StrFormat(
      "lower bound %.3f s (gap %.1f%%); idle %.1f%%; peak memory %.1f%% of "
      "the budget\n",
      price.plan.lower_bound_seconds, 100 * price.plan.GapToLowerBound(),
      100 * price.idle_fraction, 100 * price.peak_memory_fraction);
}

}  // namespace

std::string PlanPriceToJson(const PlanPrice& price) {
  nlohmann::ordered_json json = StepFields(price, "slowest_group_seconds",
                                           price.plan.slowest_group_seconds);
  json["groups"] = GroupPricesJson(price.groups);
  return json.dump();
}

std::string PlanPriceToTable(const PlanPrice& price) {
  return absl::StrCat(
      absl::StrFormat("predicted step %.3f s (slowest group %.3f s + exposed "
                      "all-reduce %.3f s); ",
                      price.plan.predicted_step_seconds,
                      price.plan.slowest_group_seconds,
                      price.plan.exposed_allreduce_seconds),
      BoundIdleAndMemoryLine(price), GroupPricesTable(price.groups));
}

std::string PhasedPlanPriceToJson(const PhasedPlanPrice& price) {
  nlohmann::ordered_json phases = nlohmann::ordered_json::array();
  for (size_t p = 0; p < price.phases.size(); ++p) {
    phases.push_back({{"seconds", price.plan.phases[p].slowest_group_seconds},
                      {"groups", GroupPricesJson(price.phases[p])}});
  }
  nlohmann::ordered_json json =
      StepFields(price, "phases_seconds", price.plan.phases_seconds);
  json["phases"] = std::move(phases);
  return json.dump();
}

std::string PhasedPlanPriceToTable(const PhasedPlanPrice& price) {
  std::string table = absl::StrCat(
      absl::StrFormat(
          "predicted step %.3f s (%d phases %.3f s + exposed all-reduce "
          "%.3f s); ",
          price.plan.predicted_step_seconds, price.plan.phases.size(),
          price.plan.phases_seconds, price.plan.exposed_allreduce_seconds),
      BoundIdleAndMemoryLine(price));
  for (size_t p = 0; p < price.phases.size(); ++p) {
    absl::StrAppend(&table,
                    absl::StrFormat("phase %d: %.3f s (its slowest group)\n", p,
                                    price.plan.phases[p].slowest_group_seconds),
                    GroupPricesTable(price.phases[p]));
  }
  return table;
}

}  // namespace dcp
