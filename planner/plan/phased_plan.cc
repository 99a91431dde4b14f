#include "planner/plan/phased_plan.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/plan/layout.h"
#include "planner/plan/validate.h"

namespace dcp {

PhasedPlan AsOnePhase(Plan plan) {
  PhasedPlan phased;
  phased.strategy = plan.strategy;
  phased.predicted_step_seconds = plan.predicted_step_seconds;
  phased.phases_seconds = plan.slowest_group_seconds;
  phased.exposed_allreduce_seconds = plan.exposed_allreduce_seconds;
  phased.lower_bound_seconds = plan.lower_bound_seconds;
  phased.phases.push_back(std::move(plan));
  return phased;
}

void PredictPhasedPlan(const CostModel& cost_model,
                       absl::Span<const int64_t> lengths_tokens,
                       PhasedPlan& plan) {
  if (!plan.barriers) {
    PredictUnbarrieredPhasedPlan(cost_model, lengths_tokens, plan);
    return;
  }
  plan.phases_seconds = 0;
  plan.exposed_allreduce_seconds = 0;
  for (Plan& phase : plan.phases) {
    PredictPlan(cost_model, lengths_tokens, phase);
    plan.phases_seconds += phase.slowest_group_seconds;
  }
  // Gradients accumulate over every phase; the all-reduce streams behind
  // the last backward of the last phase's slowest group, as in PredictPlan.
  if (!plan.phases.empty()) {
    plan.exposed_allreduce_seconds =
        plan.phases.back().exposed_allreduce_seconds;
  } else {
    plan.exposed_allreduce_seconds = cost_model.GradientAllReduceSeconds();
  }
  // One optimizer step per step, after the all-reduce.
  plan.predicted_step_seconds = plan.phases_seconds +
                                plan.exposed_allreduce_seconds +
                                cost_model.OptimizerStepSeconds();
}

std::optional<int> FewestCheckpointedLayersThatFit(
    const CostModel& cost_model, absl::Span<const int64_t> lengths_tokens,
    PhasedPlan& plan, bool set_each) {
  int layers = 0;
  for (Plan& phase : plan.phases) {
    for (GroupPlan& group : phase.groups) {
      for (MicroBatchPlan& micro_batch : group.micro_batches) {
        std::optional<int> needed =
            cost_model.MinCheckpointedLayers(ShapeOfSequences(
                lengths_tokens, micro_batch.sequence_indices, group.sp_size()));
        if (!needed) return std::nullopt;
        layers = std::max(layers, *needed);
        if (set_each) micro_batch.checkpointed_layers = *needed;
      }
    }
  }
  return layers;
}

void SetCheckpointedLayers(PhasedPlan& plan, int layers) {
  for (Plan& phase : plan.phases) {
    for (GroupPlan& group : phase.groups) {
      for (MicroBatchPlan& micro_batch : group.micro_batches) {
        micro_batch.checkpointed_layers = layers;
      }
    }
  }
}

void PredictUnbarrieredPhasedPlan(const CostModel& cost_model,
                                  absl::Span<const int64_t> lengths_tokens,
                                  PhasedPlan& plan) {
  const int world = cost_model.cluster().NumGpus();
  std::vector<double> free_at(world, 0);
  double finish = 0;
  plan.exposed_allreduce_seconds = cost_model.GradientAllReduceSeconds();
  for (Plan& phase : plan.phases) {
    PredictPlan(cost_model, lengths_tokens, phase);
    for (const GroupPlan& group : phase.groups) {
      if (group.micro_batches.empty()) continue;
      double start = 0;
      for (int rank : group.ranks) start = std::max(start, free_at[rank]);
      const double end = start + group.predicted_seconds;
      for (int rank : group.ranks) free_at[rank] = end;
      if (end >= finish) {
        finish = end;
        plan.exposed_allreduce_seconds = phase.exposed_allreduce_seconds;
      }
    }
  }
  plan.phases_seconds = finish;
  plan.predicted_step_seconds = finish + plan.exposed_allreduce_seconds +
                                cost_model.OptimizerStepSeconds();
}

double MeanIdleFraction(const PhasedPlan& plan) {
  if (plan.phases_seconds <= 0) return 0;
  double idle_gpu_seconds = 0;
  int gpus = 0;
  for (const Plan& phase : plan.phases) {
    int phase_gpus = 0;
    for (const GroupPlan& group : phase.groups) {
      idle_gpu_seconds += group.sp_size() * (phase.slowest_group_seconds -
                                             group.predicted_seconds);
      phase_gpus += group.sp_size();
    }
    gpus = std::max(gpus, phase_gpus);
  }
  return gpus > 0 ? idle_gpu_seconds / (gpus * plan.phases_seconds) : 0;
}

double MaxPeakBytes(const PhasedPlan& plan) {
  double peak = 0;
  for (const Plan& phase : plan.phases)
    peak = std::max(peak, MaxPeakBytes(phase));
  return peak;
}

PhaseBatch PhaseAsBatch(absl::Span<const int64_t> lengths_tokens,
                        const Plan& phase) {
  PhaseBatch batch;
  batch.plan = phase;
  for (GroupPlan& group : batch.plan.groups) {
    for (MicroBatchPlan& micro_batch : group.micro_batches) {
      for (int& index : micro_batch.sequence_indices) {
        batch.lengths_tokens.push_back(lengths_tokens[index]);
        index = static_cast<int>(batch.lengths_tokens.size()) - 1;
      }
    }
  }
  return batch;
}

absl::StatusOr<Plan> LayOutPhase(const ClusterSpec& cluster,
                                 std::vector<PhaseGroup> groups) {
  int used = 0;
  for (const PhaseGroup& group : groups) used += group.sp_size;
  const int world = cluster.NumGpus();
  if (used > world) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the phase's groups take ", used, " ranks; the world has ", world));
  }
  std::vector<int> sizes;
  for (const PhaseGroup& group : groups) sizes.push_back(group.sp_size);
  sizes.resize(world - used + groups.size(), 1);
  absl::StatusOr<std::vector<int>> first_ranks = PlaceGroups(sizes, cluster);
  if (!first_ranks.ok()) return first_ranks.status();
  Plan phase;
  for (size_t g = 0; g < sizes.size(); ++g) {
    GroupPlan group;
    for (int r = 0; r < sizes[g]; ++r)
      group.ranks.push_back((*first_ranks)[g] + r);
    if (g < groups.size())
      group.micro_batches = std::move(groups[g].micro_batches);
    phase.groups.push_back(std::move(group));
  }
  return phase;
}

namespace {

// ValidatePhasedPlan; each phase checked with ValidatePlan when `cost_model`
// is given, else with ValidatePlanStructure on `model` and `cluster`.
absl::Status ValidatePhases(const CostModel* cost_model, const ModelSpec& model,
                            const ClusterSpec& cluster,
                            absl::Span<const int64_t> lengths_tokens,
                            const PhasedPlan& plan) {
  if (plan.phases.empty()) {
    return absl::InvalidArgumentError(
        "the phased plan has no phases; give it at least one");
  }
  const int num_sequences = static_cast<int>(lengths_tokens.size());
  std::vector<std::string> problems;
  // Where each sequence was first planned.
  std::vector<int> phase_of(num_sequences, -1);
  for (int p = 0; p < static_cast<int>(plan.phases.size()); ++p) {
    for (const GroupPlan& group : plan.phases[p].groups) {
      for (const MicroBatchPlan& micro_batch : group.micro_batches) {
        for (int index : micro_batch.sequence_indices) {
          if (index < 0 || index >= num_sequences) {
            problems.push_back(absl::StrCat("phase ", p, ": sequence index ",
                                            index, " is outside [0, ",
                                            num_sequences, ")"));
          } else if (phase_of[index] >= 0) {
            problems.push_back(absl::StrCat(
                "sequence ", index, " is planned twice (phases ",
                phase_of[index], " and ", p, "); each runs exactly once"));
          } else {
            phase_of[index] = p;
          }
        }
      }
    }
  }
  std::vector<int> missing;
  for (int i = 0; i < num_sequences; ++i) {
    if (phase_of[i] < 0) missing.push_back(i);
  }
  if (!missing.empty()) {
    problems.push_back(
        absl::StrCat(missing.size(), " of ", num_sequences,
                     " sequences are in no phase (first: ", missing.front(),
                     "); every sequence must be planned once"));
  }
  if (!problems.empty()) {
    if (problems.size() > 10) problems.resize(10);
    return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
  }
  // Each phase is checked as a plan of its own sequences.
  for (int p = 0; p < static_cast<int>(plan.phases.size()); ++p) {
    const PhaseBatch batch = PhaseAsBatch(lengths_tokens, plan.phases[p]);
    if (batch.lengths_tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "phase ", p, " runs no sequences; drop the empty phase"));
    }
    const absl::Status status =
        cost_model != nullptr
            ? ValidatePlan(*cost_model, batch.lengths_tokens, batch.plan)
            : ValidatePlanStructure(model, cluster, batch.lengths_tokens,
                                    batch.plan);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("phase ", p, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePhasedPlan(const CostModel& cost_model,
                                absl::Span<const int64_t> lengths_tokens,
                                const PhasedPlan& plan) {
  return ValidatePhases(&cost_model, cost_model.model(), cost_model.cluster(),
                        lengths_tokens, plan);
}

absl::Status ValidatePhasedPlanStructure(
    const ModelSpec& model, const ClusterSpec& cluster,
    absl::Span<const int64_t> lengths_tokens, const PhasedPlan& plan) {
  return ValidatePhases(nullptr, model, cluster, lengths_tokens, plan);
}

}  // namespace dcp
