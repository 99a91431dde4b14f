// What the plan executor needs of a model, whatever kind it is: the GPT
// decoder (model.h) trains on token ids with a next-token loss, the video
// DiT (dit_model.h) on latent patches with a diffusion loss. Both run a
// packed micro-batch Ulysses-sequence-parallel over an SP group, recompute
// the first k layers, and return the sum of their per-token losses, which
// the executor weights per token over the whole global batch.

#ifndef DCP_WORKER_EXECUTION_TRAINABLE_MODEL_H_
#define DCP_WORKER_EXECUTION_TRAINABLE_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cost_model/model_spec.h"
#include "torch/torch.h"
#include "worker/communication/sequence_parallel.h"
#include "worker/execution/latent_dataset.h"

namespace dcp {

/// One sequence of a micro-batch as a model reads it: token ids for a
/// language model, or a latent sample for a diffusion model (the other
/// member stays empty). Plain value.
struct SequenceInput {
  std::vector<int64_t> token_ids;
  LatentSample latent;

  /// Tokens of the sequence, whichever member holds it (0: none).
  int64_t length_tokens() const {
    return token_ids.empty() ? latent.length_tokens
                             : static_cast<int64_t>(token_ids.size());
  }
};

/// This rank's share of one micro-batch's loss. Plain value.
struct ShardLoss {
  /// Sum of the per-token losses of this rank's tokens, a 0-dim tensor in
  /// the graph of the forward pass (backward() it).
  torch::Tensor loss_sum;
  /// This rank's tokens, padding included; those counted by the loss; and
  /// its real (unpadded) tokens.
  int64_t local_tokens = 0;
  int64_t loss_tokens = 0;
  int64_t real_tokens = 0;
};

/// A model the plan executor can train. Not thread-safe: one thread runs
/// forward and backward.
class TrainableModel : public torch::nn::Module {
 public:
  virtual const ModelSpec& spec() const = 0;

  /// OK when Ulysses over `sp_size` ranks can shard this model's heads.
  virtual absl::Status CheckSequenceParallelSize(int sp_size) const = 0;

  /// Tokens of a sequence of `length_tokens` that its loss counts (a
  /// next-token loss skips the last one). The executor weights every
  /// token's loss by 1 / (this summed over the global batch).
  virtual int64_t LossTokensOfSequence(int64_t length_tokens) const = 0;

  /// Forward of this rank's shard (rank sp.rank() of sp.size()) of the
  /// packed micro-batch `sequences`, the first `checkpointed_layers`
  /// recomputed in backward, and the sum of its per-token losses. Every
  /// member of sp.group calls it with the same sequences and layers, then
  /// runs backward. INVALID_ARGUMENT for sequences the model cannot read
  /// (empty, the wrong kind, out of range); a collective's status when an
  /// all-to-all fails.
  virtual absl::StatusOr<ShardLoss> ShardLossSum(
      const std::vector<SequenceInput>& sequences,
      const SequenceParallelContext& sp, int checkpointed_layers) = 0;
};

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_TRAINABLE_MODEL_H_
