#include "planner/plan/plan.h"

#include <algorithm>
#include <vector>

namespace dcp {

MicroBatchShape ShapeOfSequences(absl::Span<const int64_t> lengths_tokens,
                                 absl::Span<const int> sequence_indices,
                                 int sp_size) {
  MicroBatchShape shape;
  shape.sp_size = sp_size;
  for (int index : sequence_indices) shape.AddSequence(lengths_tokens[index]);
  return shape;
}

double LockstepSeconds(const CostModel& cost_model,
                       absl::Span<const int64_t> lengths_tokens,
                       const Plan& plan) {
  size_t most = 0;
  for (const GroupPlan& group : plan.groups) {
    most = std::max(most, group.micro_batches.size());
  }
  if (most == 0 || lengths_tokens.empty()) return 0;
  const int64_t shortest =
      *std::min_element(lengths_tokens.begin(), lengths_tokens.end());
  // The slowest k-th micro-batch over the groups, for every k.
  std::vector<double> slowest(most, 0.0);
  for (const GroupPlan& group : plan.groups) {
    const size_t padding = most - group.micro_batches.size();
    if (padding > 0) {
      MicroBatchShape shape;
      shape.sp_size = group.sp_size();
      shape.AddSequence(shortest);
      const double padding_seconds = cost_model.MicroBatch(shape, 0).total_seconds;
      for (size_t k = 0; k < padding; ++k) {
        slowest[k] = std::max(slowest[k], padding_seconds);
      }
    }
    for (size_t m = 0; m < group.micro_batches.size(); ++m) {
      slowest[padding + m] = std::max(
          slowest[padding + m], group.micro_batches[m].predicted_seconds);
    }
  }
  double seconds = 0;
  for (double k_seconds : slowest) seconds += k_seconds;
  return seconds;
}

void PredictPlan(const CostModel& cost_model,
                 absl::Span<const int64_t> lengths_tokens, Plan& plan) {
  plan.slowest_group_seconds = 0;
  double last_backward_of_slowest = 0;
  for (GroupPlan& group : plan.groups) {
    group.predicted_seconds = 0;
    double last_backward = 0;
    for (MicroBatchPlan& micro_batch : group.micro_batches) {
      const MicroBatchCost cost = cost_model.MicroBatch(
          ShapeOfSequences(lengths_tokens, micro_batch.sequence_indices,
                           group.sp_size()),
          micro_batch.checkpointed_layers);
      micro_batch.predicted_seconds = cost.total_seconds;
      micro_batch.predicted_peak_bytes = cost.peak_bytes;
      group.predicted_seconds += cost.total_seconds;
      last_backward = cost.backward_seconds;
    }
    if (group.predicted_seconds > plan.slowest_group_seconds) {
      plan.slowest_group_seconds = group.predicted_seconds;
      last_backward_of_slowest = last_backward;
    }
  }
  if (cost_model.ShardsParameters()) {
    plan.slowest_group_seconds = std::max(
        plan.slowest_group_seconds,
        LockstepSeconds(cost_model, lengths_tokens, plan));
  }
  // Gradients stream into the all-reduce while the slowest group runs its
  // last backward; only the rest is exposed.
  plan.exposed_allreduce_seconds =
      std::max(0.0, cost_model.GradientAllReduceSeconds() -
                        last_backward_of_slowest);
  // The optimizer step runs after the all-reduce, hidden by nothing.
  plan.predicted_step_seconds = plan.slowest_group_seconds +
                                plan.exposed_allreduce_seconds +
                                cost_model.OptimizerStepSeconds();
}

double MaxPeakBytes(const Plan& plan) {
  double peak = 0;
  for (const GroupPlan& group : plan.groups) {
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      peak = std::max(peak, micro_batch.predicted_peak_bytes);
    }
  }
  return peak;
}

int MicroBatchCount(const Plan& plan) {
  int micro_batches = 0;
  for (const GroupPlan& group : plan.groups) {
    micro_batches += static_cast<int>(group.micro_batches.size());
  }
  return micro_batches;
}

double MeanIdleFraction(const Plan& plan) {
  if (plan.slowest_group_seconds <= 0) return 0;
  double idle_gpu_fraction = 0;
  int gpus = 0;
  for (const GroupPlan& group : plan.groups) {
    idle_gpu_fraction += group.sp_size() *
                         (1 - group.predicted_seconds /
                                  plan.slowest_group_seconds);
    gpus += group.sp_size();
  }
  return gpus > 0 ? idle_gpu_fraction / gpus : 0;
}

}  // namespace dcp
