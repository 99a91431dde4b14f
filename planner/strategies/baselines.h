#ifndef DCP_PLANNER_BASELINES_H_
#define DCP_PLANNER_BASELINES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/plan.h"

namespace dcp {

/// How static training is configured: for the longest sequence of the whole
/// workload, once, before training.
struct StaticOptions {
  /// Longest sequence the workload may produce; 0 means the batch's longest.
  int64_t workload_max_length_tokens = 0;
  /// `bucket`: sequences per micro-batch.
  int micro_batch_sequences = 1;
  /// The static SP size; 0 chooses the smallest legal size that fits the
  /// longest sequence.
  int sp_size = 0;
};

/// One static SP size (the given one, or else the smallest legal size on
/// which the workload's longest sequence fits with full recompute) and the
/// one recompute setting that size needs for that sequence. A given size
/// must be legal and hold that sequence.
struct StaticConfig {
  int sp_size = 1;
  int checkpointed_layers = 0;
};
absl::StatusOr<StaticConfig> ChooseStaticConfig(const CostModel& cost_model,
                                                const StaticOptions& options,
                                                absl::Span<const int64_t>
                                                    lengths_tokens);

/// Both baselines return predicted plans without a lower bound (callers that
/// report gaps compute StepTimeLowerBound once for all strategies).

/// `bucket`: the static SP, data parallel over the rest, sequences dealt out
/// round-robin in sampler order, a fixed number of sequences per micro-batch
/// (so a fixed accumulation count), one recompute setting.
absl::StatusOr<Plan> PlanBucket(const CostModel& cost_model,
                                absl::Span<const int64_t> lengths_tokens,
                                const StaticOptions& options);

/// `packed`: the static SP and recompute, sequences packed (first-fit
/// decreasing) into micro-batches of the capacity that setting allows, and
/// micro-batches balanced greedily by tokens over the data-parallel groups.
absl::StatusOr<Plan> PlanPacked(const CostModel& cost_model,
                                absl::Span<const int64_t> lengths_tokens,
                                const StaticOptions& options);

}  // namespace dcp

#endif  // DCP_PLANNER_BASELINES_H_
