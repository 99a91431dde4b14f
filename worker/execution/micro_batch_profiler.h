// Whole micro-batches timed as the plan executor runs them: at SP 1 on one
// rank (kMicroBatch samples) and over the profile's SP groups with Ulysses
// attention (kSpMicroBatch samples), plus the optimizer step. Part of
// RunProfile (profiler.h), which validates the options first.

#ifndef DCP_WORKER_EXECUTION_MICRO_BATCH_PROFILER_H_
#define DCP_WORKER_EXECUTION_MICRO_BATCH_PROFILER_H_

#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "cost_model/fitting.h"
#include "cost_model/model_spec.h"
#include "worker/communication/communicator.h"
#include "worker/execution/profile_timer.h"
#include "worker/execution/profiler.h"

namespace dcp {

/// kMicroBatch samples of options.micro_batch_shapes at each checkpointed
/// layer count, then (options.optimizer_step) kOptimizerStep samples, on
/// this rank alone.
absl::Status ProfileMicroBatches(const ModelSpec& model,
                                 const ProfileOptions& options,
                                 const ProfileTimer& timer,
                                 std::vector<ProfileSample>& samples);

/// For each of `group_sizes` (ascending), over the block of consecutive
/// ranks [k*s, (k+1)*s) holding this rank: options.sp_micro_batch_shapes
/// at each checkpointed-layer count, every member running the same
/// sequences (ShardLossSum over the group, then backward), each run after
/// an untimed barrier over the block: options.warmup untimed runs, then
/// options.sp_micro_batch_repeats timed. One kSpMicroBatch sample per shape
/// and count: the mean whole time, and the mean time inside the all-to-alls
/// (at most the former). A collective protocol: every rank
/// calls it with equal arguments.
absl::Status ProfileSpMicroBatches(const ModelSpec& model, Communicator& comm,
                                   int gpus_per_node,
                                   const std::vector<int>& group_sizes,
                                   const ProfileOptions& options,
                                   const Clock& clock,
                                   std::vector<ProfileSample>& samples);

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_MICRO_BATCH_PROFILER_H_
