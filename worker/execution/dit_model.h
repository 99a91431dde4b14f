// The video diffusion transformer (DiT) the worker trains for model specs
// with full attention and adaLN modulation (`video-dit-1b`, `tiny-dit`):
// latent patches in, a velocity prediction out, a diffusion loss per token.

#ifndef DCP_WORKER_EXECUTION_DIT_MODEL_H_
#define DCP_WORKER_EXECUTION_DIT_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cost_model/model_spec.h"
#include "torch/torch.h"
#include "worker/communication/sequence_parallel.h"
#include "worker/execution/latent_dataset.h"
#include "worker/execution/model.h"
#include "worker/execution/trainable_model.h"

namespace dcp {

/// True for the specs DitModel builds: bidirectional attention
/// (causal = false) with adaLN modulation.
bool IsDiffusionTransformerSpec(const ModelSpec& spec);

struct DitModelOptions {
  /// Seeds the initial weights; equal seeds give identical weights.
  uint64_t seed = 0;
  /// Parameter and activation dtype (the gradient-equivalence checks use
  /// float32).
  torch::Dtype dtype = torch::kFloat32;
  torch::Device device = torch::kCPU;
  /// Standard deviation of the normal initialisation of the matrices.
  double init_std = 0.02;
  /// Numbers per latent patch, the width of the input and of the
  /// prediction: latent channels x patch volume (16 = 4 VAE channels x a
  /// 1 x 2 x 2 patch, as Open-Sora's DiT).
  int64_t latent_channels = 16;
  /// Width of the sinusoidal timestep features the timestep MLP reads.
  int64_t timestep_features = 256;
  double layer_norm_epsilon = 1e-6;
  /// adaLN-Zero: the modulation and output projections start at zero, so
  /// every block starts as the identity and the prediction as 0. False
  /// draws them like the other matrices (so that every gradient is non-zero
  /// from the first step, as the equivalence tests want).
  bool zero_init_modulation = true;
};

/// One rank's share of a packed micro-batch of latent samples under Ulysses
/// SP of size s, cut as ShardPackedSequences cuts token ids: sequence i of
/// L_i tokens is padded to P_i = ceil(L_i / s) * s and rank r holds tokens
/// [r P_i / s, (r + 1) P_i / s). Plain value.
struct DitShard {
  /// The model's input (1 - t) x0 + t eps per local token, float32
  /// [num_local_tokens, C]; zeros for padding.
  torch::Tensor noisy_latents;
  /// The velocity eps - x0 to predict, float32 [num_local_tokens, C].
  torch::Tensor target_velocity;
  /// 1 for real tokens, 0 for padding, float32 [num_local_tokens].
  torch::Tensor loss_weights;
  /// Position of each local token within its sequence, int64.
  torch::Tensor positions;
  /// The micro-batch sequence each local token belongs to, int64.
  torch::Tensor sequence_of_token;
  /// Diffusion time of each sequence, float64 [num_sequences].
  torch::Tensor timesteps;
  std::vector<int64_t> slice_tokens;
  std::vector<int64_t> sequence_tokens;
  int64_t num_real_tokens = 0;

  int64_t num_local_tokens() const;
};

/// Cuts `samples` (each with L >= 1 tokens of `channels` numbers) into the
/// slice of SP rank `sp_rank` of `sp_size`. INVALID_ARGUMENT for an empty
/// sample, a sample of another width or inconsistent sizes, or a bad rank.
absl::StatusOr<DitShard> ShardLatentSequences(
    const std::vector<LatentSample>& samples, int64_t channels, int sp_rank,
    int sp_size);

namespace dit_internal {
struct ForwardContext;
}  // namespace dit_internal

/// One DiT block: adaLN(shift, scale) -> bidirectional multi-head attention
/// (Ulysses over the forward's group) -> gated residual -> adaLN -> MLP
/// (GELU, or SwiGLU for a gated_mlp spec) -> gated residual. Shift, scale
/// and gate of both halves come from the sequence's conditioning embedding
/// through one projection (6 h x h). No biases; the LayerNorms have no
/// weights of their own (the modulation scales them). Parameters are
/// float32 on the CPU when made (move the module to change either).
///
/// Not thread-safe.
class DitBlock : public AttentionBlock {
 public:
  /// `spec` must pass DitModel::CheckSpec.
  DitBlock(const ModelSpec& spec, const DitModelOptions& options,
           at::Generator& generator);

  /// The block on x [T, hidden] of local tokens with the conditioning
  /// embedding of each micro-batch sequence, [num_sequences, hidden].
  torch::Tensor Forward(const torch::Tensor& x,
                        const torch::Tensor& conditioning,
                        const dit_internal::ForwardContext& context) const;

  /// Shift, scale, gate (attention), shift, scale, gate (MLP) of each
  /// sequence: [num_sequences, 6 * hidden].
  torch::Tensor Modulation(const torch::Tensor& conditioning) const;

  torch::Tensor Mlp(const torch::Tensor& g) const;

 private:
  torch::Tensor Attention(const torch::Tensor& h,
                          const dit_internal::ForwardContext& context) const;

  bool gated_mlp_;
  double epsilon_;
  torch::Tensor modulation_, w_in_, w_gate_, w_out_;
};

/// A DiT built from a ModelSpec (Peebles and Xie's adaLN-Zero design over
/// packed variable-length sequences): a linear patch embedding of the
/// latents plus a sinusoidal position embedding; a timestep embedding
/// (sinusoidal features -> linear -> SiLU -> linear) per sequence as the
/// condition; num_layers DitBlocks; a final adaLN (shift, scale) and a
/// linear projection back to the latent width. It predicts the rectified
/// flow velocity eps - x0 from (1 - t) x0 + t eps; the loss of a token is
/// the mean over its numbers of the squared error.
///
/// Attention is bidirectional within each sequence of a packed micro-batch
/// (no sequence sees another, padding is never a key) and Ulysses sequence
/// parallel exactly as GptModel's: Q, K, V through one all-to-all, attention
/// on full sequences for the local heads, one all-to-all back, KV heads
/// replicated when the SP size does not divide them.
///
/// Not thread-safe: one thread runs forward and backward.
class DitModel : public TrainableModel {
 public:
  /// INVALID_ARGUMENT unless CheckSpec accepts `spec` and the options have
  /// latent_channels >= 1 and an even timestep_features >= 2.
  static absl::StatusOr<std::shared_ptr<DitModel>> Create(
      const ModelSpec& spec, const DitModelOptions& options = {});

  /// OK for a valid spec with causal = false, adaln_modulation = true and
  /// no vocabulary; INVALID_ARGUMENT naming the field otherwise.
  static absl::Status CheckSpec(const ModelSpec& spec);

  absl::Status CheckSequenceParallelSize(int sp_size) const override;

  /// Predicted velocity [num_local_tokens, latent_channels] of this rank's
  /// shard; the first `checkpointed_layers` blocks (clamped) recomputed in
  /// backward. Every member of `sp.group` calls it with the same sequence
  /// lengths and checkpointed_layers, then runs backward.
  absl::StatusOr<torch::Tensor> Forward(const DitShard& shard,
                                        const SequenceParallelContext& sp,
                                        int checkpointed_layers);

  /// Sum over the shard's real tokens of the mean squared error of
  /// `predicted` against the target velocity, 0-dim, in float32 or wider.
  static torch::Tensor VelocityLossSum(const torch::Tensor& predicted,
                                       const DitShard& shard);

  /// TrainableModel: every real token is a diffusion target.
  int64_t LossTokensOfSequence(int64_t length_tokens) const override {
    return length_tokens;
  }
  /// TrainableModel: ShardLatentSequences of the latent samples, Forward
  /// and VelocityLossSum.
  absl::StatusOr<ShardLoss> ShardLossSum(
      const std::vector<SequenceInput>& sequences,
      const SequenceParallelContext& sp, int checkpointed_layers) override;

  const ModelSpec& spec() const override { return spec_; }
  const DitModelOptions& options() const { return options_; }

 private:
  DitModel(const ModelSpec& spec, const DitModelOptions& options);
  torch::Tensor TimestepEmbedding(const torch::Tensor& timesteps) const;

  ModelSpec spec_;
  DitModelOptions options_;
  torch::Tensor patch_embedding_;  // [hidden, C]
  torch::Tensor timestep_in_;      // [hidden, timestep_features]
  torch::Tensor timestep_out_;     // [hidden, hidden]
  std::vector<std::shared_ptr<DitBlock>> blocks_;
  torch::Tensor final_modulation_;  // [2 hidden, hidden]
  torch::Tensor output_;            // [C, hidden]
};

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_DIT_MODEL_H_
