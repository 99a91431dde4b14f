#ifndef DCP_WORKER_EXECUTION_PLAN_EXECUTOR_H_
#define DCP_WORKER_EXECUTION_PLAN_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"
#include "torch/torch.h"
#include "worker/communication/communicator.h"
#include "worker/execution/master_weight_state.h"
#include "worker/execution/model.h"
#include "worker/execution/trainable_model.h"

namespace dcp {

struct PlanExecutorOptions {
  /// Deadline of every collective (all-to-alls and the all-reduces).
  absl::Duration collective_timeout = absl::Seconds(60);
  /// torch::optim::AdamW hyper-parameters.
  double learning_rate = 1e-3;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_epsilon = 1e-8;
  double weight_decay = 0.1;
  /// Times micro-batches and collectives (its MonotonicNow); null means
  /// RealClock. Must outlive the executor.
  const Clock* clock = nullptr;
  /// Called before every clock read that times work (micro-batches, the
  /// all-to-alls inside them, collectives): empty means synchronising the
  /// model's device when it is a GPU (DeviceWaiter), so that each time
  /// covers the work it names and not kernels still queued. Tests inject a
  /// recorder.
  std::function<void()> wait_for_device;
  /// Gradients are all-reduced in buckets of about this many bytes (a
  /// parameter larger than a bucket gets its own), so the flat copy they
  /// travel in never holds more than one bucket.
  int64_t all_reduce_bucket_bytes = int64_t{64} << 20;
  /// ZeRO-1: the float32 master weights and AdamW states are sharded over
  /// the world (under Ulysses every rank is a data-parallel replica): the
  /// float32 gradients are reduce-scattered, each rank updates its shard,
  /// and the updated weights are all-gathered in the model's dtype.
  bool zero1 = false;
};

/// Bytes of training state a rank holds, measured from its tensors.
struct TrainingStateBytes {
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  /// AdamW's moments, plus the float32 master weights where they are kept
  /// apart from the parameters (bf16 weights, or ZeRO-1).
  int64_t optimizer_bytes = 0;

  int64_t total() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes;
  }
};

/// What one micro-batch did on this rank.
struct MicroBatchResult {
  /// Index into the phased plan's phases of the phase it ran in (0 for a
  /// plan of one layout).
  int phase = 0;
  int num_sequences = 0;
  /// This rank's tokens, padding included, and those its loss counts (with
  /// a next-token target; every real token of a diffusion model).
  int64_t local_tokens = 0;
  int64_t predicted_tokens = 0;
  /// This rank's real (unpadded) tokens: its slice of each sequence, so
  /// that over the SP ranks of the group they add up to the micro-batch's
  /// sequence lengths.
  int64_t real_tokens = 0;
  int checkpointed_layers = 0;
  /// Forward + backward wall time minus communication_seconds.
  double compute_seconds = 0;
  /// Time inside the Ulysses all-to-alls (forward, recompute, backward);
  /// 0 for SP 1.
  double communication_seconds = 0;
  int64_t all_to_all_calls = 0;
  /// This rank's loss contribution: its token cross-entropy sum divided by
  /// the global batch's predicted tokens.
  double loss = 0;
  /// Most bytes allocated at once during the micro-batch (everything the
  /// process holds, static state included): CUDA's allocator statistics on
  /// a GPU, CpuAllocationMeter on the CPU while it is installed; -1 when
  /// neither measures.
  int64_t peak_allocated_bytes = -1;
};

struct StepResult {
  /// Index into Plan::groups of this rank's group, its SP size and rank
  /// (of the first phase's groups for a phased plan).
  int group_index = -1;
  int sp_size = 0;
  int sp_rank = 0;
  /// This rank's group in each phase (one entry for a plan of one layout).
  std::vector<int> phase_group_indices;
  /// One per micro-batch of the group, in order (phase after phase).
  std::vector<MicroBatchResult> micro_batches;
  /// Time spent at the barriers between phases (0 for one layout).
  double phase_barrier_seconds = 0;
  /// The world all-reduce of the gradients (the reduce-scatter with ZeRO-1).
  double gradient_allreduce_seconds = 0;
  /// The all-gather of the updated weights (ZeRO-1 only).
  double weight_allgather_seconds = 0;
  /// Sum of micro_batches[i].loss.
  double local_loss = 0;
  /// Mean token loss of the whole global batch (local losses all-reduced).
  double global_loss = 0;
  /// Most bytes allocated on the device at once over the whole step: the
  /// maximum over its micro-batches (each measured on its own) and the
  /// gradient reduction and optimizer step after them; -1 where the device
  /// is not measured (PeakAllocatedBytes).
  int64_t peak_allocated_bytes = -1;
};

/// Executes one rank's part of a dcp::Plan per training step: runs its SP
/// group's micro-batches (gradient accumulation of however many the group
/// has, each checkpointing its first k layers), all-reduces the gradients
/// over the world, and takes an AdamW step. Whatever the plan, the gradient
/// after the all-reduce is that of the mean token loss of the whole global
/// batch, so every plan trains the same model.
///
/// Precision follows the model's dtype. A float32 model without ZeRO-1
/// keeps torch's AdamW on the parameters themselves. Otherwise (a bfloat16
/// model, or ZeRO-1) the parameters become views of one flat buffer in the
/// model's dtype and their gradients views of one flat float32 buffer, so
/// micro-batches accumulate in float32 whatever the compute dtype; AdamW
/// updates float32 master weights of this rank's shard of the flat buffer
/// (all of it without ZeRO-1), which are then written back (all-gathered)
/// in the model's dtype. This is what MemoryModel with SetTrainingStateBytes
/// counts.
///
/// Times are measured with the options' Clock (absl::Time; RealClock is the
/// wall clock, not a steady one).
///
/// Not thread-safe: one thread calls RunStep, and every rank of the world
/// calls it with the same plan.
class PlanExecutor {
 public:
  /// `model` (a GptModel, a DitModel, ...) and `communicator` must outlive
  /// the executor.
  PlanExecutor(std::shared_ptr<TrainableModel> model,
               Communicator& communicator, PlanExecutorOptions options = {});

  /// Runs one step. `tokens_of(i)` gives the token ids of global sequence i
  /// (called for this group's sequences only); `total_loss_tokens` is the
  /// number of predicted tokens in the whole global batch (sum over every
  /// sequence of its length - 1). After it returns, each parameter's grad()
  /// holds the all-reduced gradient used by the step, except with ZeRO-1
  /// over several ranks: there only reduced_gradient_shard() is reduced.
  ///
  /// Errors: INVALID_ARGUMENT when this rank is in no group (or in several),
  /// a group's SP size does not fit the model, a sequence is empty or has
  /// token ids outside the vocabulary, or total_loss_tokens <= 0; the
  /// communicator's status (DEADLINE_EXCEEDED, ...) when a collective
  /// fails. After an error the parameters may hold partial gradients and
  /// other ranks may be left waiting until their timeouts.
  absl::StatusOr<StepResult> RunStep(
      const Plan& plan,
      const std::function<std::vector<int64_t>(int sequence_index)>& tokens_of,
      int64_t total_loss_tokens);

  /// The same for any model: `inputs_of(i)` gives global sequence i as the
  /// model reads it (token ids or a latent sample), and total_loss_tokens
  /// is the sum over the global batch of model().LossTokensOfSequence(L).
  /// Errors as above (a sequence the model cannot read is
  /// INVALID_ARGUMENT).
  absl::StatusOr<StepResult> RunStep(
      const Plan& plan,
      const std::function<SequenceInput(int sequence_index)>& inputs_of,
      int64_t total_loss_tokens);

  /// The same for a plan that re-groups the ranks within a step: each
  /// phase runs this rank's group's micro-batches in that phase's layout,
  /// then every rank waits at a world barrier before the next phase;
  /// gradients accumulate over all phases until the one all-reduce and
  /// AdamW step that end the step, so any phasing of the global batch gives
  /// the gradient of its mean token loss. A plan of one phase runs exactly
  /// as RunStep(Plan). Errors as above, per phase (INVALID_ARGUMENT for a
  /// plan without phases).
  absl::StatusOr<StepResult> RunStep(
      const PhasedPlan& plan,
      const std::function<SequenceInput(int sequence_index)>& inputs_of,
      int64_t total_loss_tokens);

  TrainableModel& model() { return *model_; }
  /// The AdamW optimizer (e.g. to save or restore its state in a checkpoint).
  /// With master weights its one parameter is this rank's master shard.
  torch::optim::AdamW& optimizer() { return *optimizer_; }

  /// Whether AdamW updates float32 master weights of a flat shard (a
  /// non-float32 model, or ZeRO-1) rather than the parameters themselves.
  bool has_master_weights() const { return master_.defined(); }
  /// With master weights: this rank's shard of the flattened (parameters()
  /// order, zero-padded to a multiple of the shard count) float32 gradient
  /// summed over the world, as the last step used it; [shard size] starting
  /// at shard_offset(). Undefined otherwise.
  torch::Tensor reduced_gradient_shard() const;
  /// Where this rank's shard starts in the flattened parameters.
  int64_t shard_offset() const { return shard_offset_; }

  /// With master weights: every rank's shard of the master weights and
  /// AdamW moments, gathered over the world in chunks of about
  /// all_reduce_bucket_bytes (collective: every rank calls it), copied to
  /// the CPU and returned whole where `keep` (rank 0, which writes the
  /// checkpoint), empty tensors elsewhere so no other rank holds it all.
  /// FAILED_PRECONDITION without master weights; a collective's status.
  absl::StatusOr<MasterWeightState> GatherMasterWeightState(bool keep);

  /// With master weights: takes this rank's shard of `state` (gathered by
  /// any world size, with or without ZeRO-1) as its master weights and
  /// AdamW state, and the whole of it, in the model's dtype, as the
  /// parameters: what an uninterrupted run holds after the same steps. Local.
  /// FAILED_PRECONDITION without master weights or when the sizes do not fit
  /// this model.
  absl::Status LoadMasterWeightState(const MasterWeightState& state);

  /// What this rank holds in parameter, gradient and optimizer tensors now
  /// (AdamW's moments exist from the first step on).
  TrainingStateBytes HeldStateBytes() const;

 private:
  // Makes the parameters and gradients views of flat buffers and creates
  // the master shard.
  void FlattenParameters();
  absl::Status AllReduceGradients();
  // Finds this rank's group in `phase` (result.phase_group_indices gets
  // it) and runs its micro-batches, accumulating gradients.
  absl::Status RunPhase(
      const Plan& phase, int phase_index,
      const std::function<SequenceInput(int sequence_index)>& inputs_of,
      double inverse_total, StepResult& result);
  // Reduce(-scatter) of the flat gradients, AdamW on the master shard, and
  // the write-back (all-gather) of the weights.
  absl::Status MasterWeightStep(StepResult& result);

  std::shared_ptr<TrainableModel> model_;
  Communicator& communicator_;
  PlanExecutorOptions options_;
  const Clock* clock_;
  /// DeviceWaiter of the model's device (or the injected one); empty on the
  /// CPU.
  std::function<void()> wait_for_device_;
  /// Waits for the device, then reads clock_'s monotonic time.
  absl::Time DeviceNow() const;
  // Master-weight state; all undefined for a float32 model without ZeRO-1.
  // The flat buffers have shards * shard_size_ elements.
  torch::Tensor flat_parameters_;  // model dtype; parameters are views
  torch::Tensor flat_gradients_;   // float32; gradients are views
  torch::Tensor master_;           // float32 [shard_size_], AdamW's param
  int64_t shard_size_ = 0;
  int64_t shard_offset_ = 0;
  int64_t num_parameter_elements_ = 0;  // without the padding
  std::unique_ptr<torch::optim::AdamW> optimizer_;
};

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_PLAN_EXECUTOR_H_
