#include "planner/service/step_plan.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cost_model/micro_batch_fit.h"
#include "cost_model/online_refit.h"
#include "planner/plan/batch_check.h"
#include "planner/client/proto_convert.h"
#include "planner/search/lower_bound.h"
#include "planner/search/phased_planner.h"
#include "planner/plan/plan.h"

namespace dcp {
namespace {

// "7.28 s" for a second or more, three digits below ("0.0123 s").
std::string FormatSeconds(double seconds) {
  return seconds >= 0.995 || seconds == 0 ? absl::StrFormat("%.2f s", seconds)
                                          : absl::StrFormat("%.3g s", seconds);
}

// The summary of `group` for checking reports; adds its micro-batches to
// `shape` (and their checkpointed layers to `checkpointed_layers_sum`).
// `compute_correction`: the version's (its work over it is the work at the
// profile fit's rates).
GroupSummary SummarizeGroup(const CostModel& cost_model,
                            double compute_correction,
                            const std::vector<int64_t>& lengths,
                            const GroupPlan& group, PlanShapeStats& shape,
                            int64_t& checkpointed_layers_sum) {
  GroupSummary summary;
  summary.predicted_seconds = group.predicted_seconds;
  summary.inter_node = cost_model.SpansNodes(group.sp_size());
  for (const MicroBatchPlan& micro_batch : group.micro_batches) {
    const MicroBatchShape micro_batch_shape = ShapeOfSequences(
        lengths, micro_batch.sequence_indices, group.sp_size());
    const MicroBatchCost cost = cost_model.MicroBatch(
        micro_batch_shape, micro_batch.checkpointed_layers);
    summary.micro_batch_compute_seconds.push_back(
        std::max(0.0, cost.total_seconds - cost.communication_seconds));
    summary.micro_batch_communication_seconds.push_back(
        cost.communication_seconds);
    summary.micro_batch_sp_sizes.push_back(group.sp_size());
    const double passes =
        2.0 * cost_model.model().num_layers + micro_batch.checkpointed_layers;
    summary.micro_batch_all_to_all_calls.push_back(
        AllToAllCalls(cost_model.model(), micro_batch_shape,
                      micro_batch.checkpointed_layers));
    summary.micro_batch_all_to_all_bus_bytes.push_back(
        AllToAllBusBytes(cost_model.model(), micro_batch_shape,
                         micro_batch.checkpointed_layers));
    const double work =
        MicroBatchWorkSeconds(cost_model.model(), cost_model.params().compute,
                              micro_batch_shape,
                              micro_batch.checkpointed_layers) /
        (compute_correction > 0 ? compute_correction : 1.0);
    summary.micro_batch_fit_rows.push_back(
        {work, 1.0, passes,
         passes * static_cast<double>(micro_batch.sequence_indices.size())});
    checkpointed_layers_sum += micro_batch.checkpointed_layers;
    shape.max_checkpointed_layers = std::max(shape.max_checkpointed_layers,
                                             micro_batch.checkpointed_layers);
  }
  ++shape.groups_by_sp_size[group.sp_size()];
  shape.micro_batches += static_cast<int>(group.micro_batches.size());
  return summary;
}

}  // namespace

MakeStepPlanFunction StepPlanMaker(PhasedPlanningOptions phased) {
  return [phased](const v1::GlobalBatch& batch, const ParamsVersion& params,
                  const PlannerOptions& options, int world_size,
                  const Clock& clock) {
    return MakeStepPlanTryingPhases(batch, params, options, world_size, clock,
                                    phased);
  };
}

int64_t PlannedStepBytes(const PlannedStep& plan) {
  int64_t bytes = sizeof(PlannedStep);
  if (plan.response != nullptr) {
    bytes += static_cast<int64_t>(plan.response->SpaceUsedLong());
  }
  for (const std::shared_ptr<const std::string>& serialized :
       {plan.serialized, plan.serialized_without_sample_ids}) {
    if (serialized != nullptr) {
      bytes += static_cast<int64_t>(sizeof(std::string) + serialized->capacity());
    }
  }
  bytes += static_cast<int64_t>(plan.group_of_rank.capacity() * sizeof(int) +
                                plan.groups.capacity() * sizeof(GroupSummary));
  return bytes;
}

double PredictedPlanningSeconds(int64_t num_sequences) {
  constexpr double kSecondsAtReference = 6;
  constexpr double kReferenceSequences = 1 << 20;
  return kSecondsAtReference *
         (static_cast<double>(std::max<int64_t>(num_sequences, 0)) /
          kReferenceSequences);
}

std::shared_ptr<const PlannedStep> MakeStepPlan(const v1::GlobalBatch& batch,
                                             const ParamsVersion& params,
                                             const PlannerOptions& options,
                                             int world_size,
                                             const Clock& clock) {
  return MakeStepPlanTryingPhases(batch, params, options, world_size, clock,
                                  PhasedPlanningOptions());
}

std::shared_ptr<const PlannedStep> MakeStepPlanTryingPhases(
    const v1::GlobalBatch& batch, const ParamsVersion& params,
    const PlannerOptions& options, int world_size, const Clock& clock,
    const PhasedPlanningOptions& phased) {
  auto result = std::make_shared<PlannedStep>();
  result->params_version = params.version;
  const CostModel& cost_model = *params.cost_model;
  const int64_t step = batch.step();
  const absl::Time start = clock.MonotonicNow();
  std::vector<int64_t> lengths;
  lengths.reserve(batch.samples_size());
  for (const v1::Sample& sample : batch.samples()) {
    lengths.push_back(sample.length_tokens());
  }
  // Plans of phases are tried where the single layout's gap to the lower
  // bound leaves room for one: when enabled, and always under ZeRO-3, whose
  // per-micro-batch collectives over every rank already make the groups run
  // in lockstep.
  PhasedPlannerOptions phased_options;
  phased_options.planner_options = options;
  phased_options.min_gap_to_try =
      phased.enabled || cost_model.ShardsParameters()
          ? phased.min_gap_to_try
          : std::numeric_limits<double>::infinity();
  absl::StatusOr<PhasedPlan> planned =
      PlanPhasedBatch(cost_model, lengths, phased_options);
  if (!planned.ok()) {
    result->status = absl::Status(
        planned.status().code(),
        absl::StrCat("step ", step, ": ", planned.status().message()));
    result->planning_seconds = absl::ToDoubleSeconds(clock.MonotonicNow() - start);
    return result;
  }
  std::optional<PhasedPlan> phased_plan;
  std::optional<Plan> plan;
  if (planned->phases.size() > 1) {
    phased_plan = *std::move(planned);
  } else {
    plan = std::move(planned->phases.front());
    plan->lower_bound_seconds = planned->lower_bound_seconds;
  }
  result->planning_seconds = absl::ToDoubleSeconds(clock.MonotonicNow() - start);
  if (phased_plan.has_value()) {
    result->num_phases = static_cast<int>(phased_plan->phases.size());
    result->predicted_step_seconds = phased_plan->predicted_step_seconds;
    result->lower_bound_seconds = phased_plan->lower_bound_seconds;
    result->gap_to_lower_bound = phased_plan->GapToLowerBound();
  } else {
    result->predicted_step_seconds = plan->predicted_step_seconds;
    result->lower_bound_seconds = plan->lower_bound_seconds;
    result->gap_to_lower_bound = plan->GapToLowerBound();
  }

  auto response = std::make_shared<v1::GetPlanResponse>();
  *response->mutable_plan() = phased_plan.has_value()
                                  ? PhasedPlanToProto(*phased_plan, step)
                                  : PlanToProto(*plan, step);
  for (const v1::Sample& sample : batch.samples()) {
    response->add_sample_ids(sample.id());
  }
  response->set_params_version(params.version);
  response->set_using_default_params(params.defaults);
  {
    v1::GetPlanResponse without_ids = *response;
    without_ids.clear_sample_ids();
    result->serialized_without_sample_ids =
        std::make_shared<const std::string>(without_ids.SerializeAsString());
  }
  result->serialized =
      std::make_shared<const std::string>(response->SerializeAsString());
  result->response = std::move(response);

  result->group_of_rank.assign(world_size, -1);
  PlanShapeStats& shape = result->shape;
  int64_t checkpointed_layers_sum = 0;
  if (phased_plan.has_value()) {
    // Per rank: its group's micro-batches in each phase, phase after phase.
    result->groups.assign(world_size, GroupSummary());
    std::vector<bool> rank_has_kind(world_size, false);
    std::vector<bool> mixed_kinds(world_size, false);
    for (int rank = 0; rank < world_size; ++rank) {
      result->group_of_rank[rank] = rank;
      result->groups[rank].predicted_seconds =
          phased_plan->predicted_step_seconds;
    }
    for (const Plan& phase : phased_plan->phases) {
      for (const GroupPlan& group : phase.groups) {
        const GroupSummary summary =
            SummarizeGroup(cost_model, params.compute_correction, lengths,
                           group, shape, checkpointed_layers_sum);
        for (int rank : group.ranks) {
          if (rank < 0 || rank >= world_size) continue;
          GroupSummary& of_rank = result->groups[rank];
          const auto append = [](auto& to, const auto& from) {
            to.insert(to.end(), from.begin(), from.end());
          };
          append(of_rank.micro_batch_compute_seconds,
                 summary.micro_batch_compute_seconds);
          append(of_rank.micro_batch_communication_seconds,
                 summary.micro_batch_communication_seconds);
          append(of_rank.micro_batch_sp_sizes, summary.micro_batch_sp_sizes);
          append(of_rank.micro_batch_all_to_all_calls,
                 summary.micro_batch_all_to_all_calls);
          append(of_rank.micro_batch_all_to_all_bus_bytes,
                 summary.micro_batch_all_to_all_bus_bytes);
          append(of_rank.micro_batch_fit_rows, summary.micro_batch_fit_rows);
          if (!rank_has_kind[rank]) {
            rank_has_kind[rank] = true;
            of_rank.inter_node = summary.inter_node;
          } else if (of_rank.inter_node != summary.inter_node) {
            mixed_kinds[rank] = true;
          }
        }
      }
    }
    // A rank whose phases' groups are some inside a node and some across
    // nodes gives the all-to-all refit (fitted per kind) no samples.
    for (int rank = 0; rank < world_size; ++rank) {
      if (!mixed_kinds[rank]) continue;
      result->groups[rank].micro_batch_all_to_all_calls.clear();
      result->groups[rank].micro_batch_all_to_all_bus_bytes.clear();
    }
  } else {
    for (size_t g = 0; g < plan->groups.size(); ++g) {
      const GroupPlan& group = plan->groups[g];
      result->groups.push_back(
          SummarizeGroup(cost_model, params.compute_correction, lengths, group,
                         shape, checkpointed_layers_sum));
      for (int rank : group.ranks) {
        if (rank >= 0 && rank < world_size) {
          result->group_of_rank[rank] = static_cast<int>(g);
        }
      }
    }
  }
  shape.mean_checkpointed_layers =
      shape.micro_batches > 0
          ? static_cast<double>(checkpointed_layers_sum) / shape.micro_batches
          : 0.0;
  return result;
}

std::string DescribeStepPlan(int64_t step, const PlannedStep& plan) {
  if (!plan.status.ok()) {
    // The status already names the step.
    const absl::string_view message = plan.status.message();
    const std::string prefix = absl::StrCat("step ", step, ": ");
    return absl::StrCat("step ", step, ": not plannable: ",
                        absl::StartsWith(message, prefix)
                            ? message.substr(prefix.size())
                            : message);
  }
  std::vector<std::string> sizes;  // largest SP size first
  for (auto it = plan.shape.groups_by_sp_size.rbegin();
       it != plan.shape.groups_by_sp_size.rend(); ++it) {
    sizes.push_back(absl::StrCat(it->first, "x", it->second));
  }
  return absl::StrFormat(
      "step %d: %sSP sizes %s, %d micro-batches, predicted %s, lower bound "
      "%s (gap %.1f%%), planned in %.1f ms",
      step,
      plan.num_phases > 1 ? absl::StrCat(plan.num_phases, " phases, ") : "",
      absl::StrJoin(sizes, " "), plan.shape.micro_batches,
      FormatSeconds(plan.predicted_step_seconds),
      FormatSeconds(plan.lower_bound_seconds), 100 * plan.gap_to_lower_bound,
      1e3 * plan.planning_seconds);
}

v1::StepPlanRecord MakeStepPlanRecord(const v1::GlobalBatch& batch,
                                      const PlannedStep& plan,
                                      const ParamsVersion& params) {
  v1::StepPlanRecord record;
  record.set_step(batch.step());
  record.set_params_version(params.version);
  if (plan.response != nullptr) *record.mutable_plan() = plan.response->plan();
  record.mutable_lengths_tokens()->Reserve(batch.samples_size());
  for (const v1::Sample& sample : batch.samples()) {
    record.add_lengths_tokens(sample.length_tokens());
  }
  const CostModel& cost_model = *params.cost_model;
  *record.mutable_model() = ModelSpecToProto(cost_model.model());
  *record.mutable_cluster() = ClusterSpecToProto(cost_model.cluster());
  *record.mutable_params() = CostParamsToProto(cost_model.params());
  return record;
}

}  // namespace dcp
