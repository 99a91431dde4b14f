#ifndef DCP_WORKER_EXECUTION_PLAN_EXECUTOR_H_
#define DCP_WORKER_EXECUTION_PLAN_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "planner/plan.h"
#include "torch/torch.h"
#include "worker/communication/communicator.h"
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
  /// Times micro-batches and collectives; null means RealClock. Must
  /// outlive the executor.
  const Clock* clock = nullptr;
  /// Gradients are all-reduced in buckets of about this many bytes (a
  /// parameter larger than a bucket gets its own), so the flat copy they
  /// travel in never holds more than one bucket.
  int64_t all_reduce_bucket_bytes = int64_t{64} << 20;
};

/// What one micro-batch did on this rank.
struct MicroBatchResult {
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
};

struct StepResult {
  /// Index into Plan::groups of this rank's group, its SP size and rank.
  int group_index = -1;
  int sp_size = 0;
  int sp_rank = 0;
  /// One per micro-batch of the group, in order.
  std::vector<MicroBatchResult> micro_batches;
  /// The world all-reduce of the gradients.
  double gradient_allreduce_seconds = 0;
  /// Sum of micro_batches[i].loss.
  double local_loss = 0;
  /// Mean token loss of the whole global batch (local losses all-reduced).
  double global_loss = 0;
};

/// Executes one rank's part of a dcp::Plan per training step: runs its SP
/// group's micro-batches (gradient accumulation of however many the group
/// has, each checkpointing its first k layers), all-reduces the gradients
/// over the world, and takes an AdamW step. Whatever the plan, the gradient
/// after the all-reduce is that of the mean token loss of the whole global
/// batch, so every plan trains the same model.
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
  /// holds the all-reduced gradient used by the step.
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

  TrainableModel& model() { return *model_; }
  /// The AdamW optimizer (e.g. to save or restore its state in a checkpoint).
  torch::optim::AdamW& optimizer() { return optimizer_; }

 private:
  absl::Status AllReduceGradients();

  std::shared_ptr<TrainableModel> model_;
  Communicator& communicator_;
  PlanExecutorOptions options_;
  const Clock* clock_;
  torch::optim::AdamW optimizer_;
};

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_PLAN_EXECUTOR_H_
