#ifndef DCP_PLANNER_VIDEOSYS_DCP_H_
#define DCP_PLANNER_VIDEOSYS_DCP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/phased_plan.h"

namespace dcp {

/// What VideoSys's profiler keeps for one bucket.
struct VideoSysBucketProfile {
  /// The bucket's size the profile ran at.
  int64_t length_tokens = 0;
  int sp_size = 1;
  /// Sequences per micro-batch.
  int batch_size = 1;
  /// PAC: the fewest checkpointed layers that fit that micro-batch.
  int checkpointed_layers = 0;
  /// Predicted seconds of one such micro-batch.
  double seconds = 0;
};

/// VideoSys's profile of one bucket, priced by the cost model: for every
/// legal SP size inside a node (larger ones only while none fits), batch
/// sizes 1, 2, 4, ... while `batch_size` sequences of `length_tokens` fit
/// with full recompute, each with the least recompute that fits (PAC);
/// keeps the setting of most sequences per GPU-second (ties to the first).
/// RESOURCE_EXHAUSTED if one sequence fits on no SP size.
absl::StatusOr<VideoSysBucketProfile> ProfileVideoSysBucket(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    int64_t length_tokens);

/// VideoSys's runtime knobs (its defaults).
struct VideoSysOptions {
  /// max_grad_accumulation_steps.
  int max_accumulation = 5;
  /// min_grad_accumulation_steps.
  int min_accumulation = 2;
};

/// VideoSys's DCP-inter scheduler with PAC (sampler
/// `_build_local_bucket_id_access_order_acc`, `auto_grad_accumulation`,
/// `dynamic_recompute`), for one global batch, in our words:
///  * buckets: one per distinct length when the batch has at most 32 of
///    them (video: resolution x frames), otherwise power-of-two length bins
///    profiled at their upper edge (text has no buckets of its own); each
///    bucket's sequences, in batch order, cut into micro-batches of its
///    profiled batch size;
///  * an iteration fills the GPUs with SP groups, one bucket each: the
///    largest profiled SP size that still fits the GPUs left, the first
///    bucket of that size, one micro-batch; then every group's accumulation
///    count is chosen to even out predicted times (up to 5 x the slowest
///    micro-batch; running over a target counts 1.2 x running under; at
///    least 2 for the longest), and each group takes that many micro-batches
///    of its bucket;
///  * iterations follow each other at barriers (the phases) until the batch
///    is done; one gradient all-reduce ends the step.
/// Differences from VideoSys, so that every sequence runs exactly once:
/// no samples are dropped or repeated to fill buckets or accumulation, the
/// sampler's random choices are its deterministic ones (largest SP, first
/// bucket), and GPUs no group fits sit idle. Memory is the cost model's
/// budget (no extra headroom). Predictions filled, no lower bound.
absl::StatusOr<PhasedPlan> PlanVideoSysDcp(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens,
    const VideoSysOptions& options = {});

}  // namespace dcp

#endif  // DCP_PLANNER_VIDEOSYS_DCP_H_
