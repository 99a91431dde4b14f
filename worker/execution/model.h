#ifndef DCP_WORKER_EXECUTION_MODEL_H_
#define DCP_WORKER_EXECUTION_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cost_model/model_spec.h"
#include "torch/torch.h"
#include "worker/communication/sequence_parallel.h"
#include "worker/execution/trainable_model.h"

namespace dcp {

/// Target value of tokens that predict nothing (a sequence's last token,
/// padding); cross-entropy ignores them.
inline constexpr int64_t kIgnoredTarget = -100;

/// One rank's share of a packed micro-batch under Ulysses sequence
/// parallelism of size s. Each sequence of L tokens is padded to
/// P = ceil(L / s) * s and cut into s contiguous slices of P / s tokens; rank
/// r holds slice r of every sequence, concatenated in micro-batch order.
/// Plain value.
struct PackedShard {
  /// Input token ids, int64 [num_local_tokens]; padding is token 0.
  torch::Tensor token_ids;
  /// Position of each local token within its own sequence (restarting at 0
  /// for every sequence), int64 [num_local_tokens].
  torch::Tensor positions;
  /// Next-token target of each local token, int64 [num_local_tokens];
  /// kIgnoredTarget for each sequence's last token and for padding.
  torch::Tensor targets;
  /// Tokens of each sequence in this (and every) rank's slice: P_i / s.
  std::vector<int64_t> slice_tokens;
  /// Real (unpadded) tokens of each sequence: L_i.
  std::vector<int64_t> sequence_tokens;
  /// Local tokens with a target (counted by the loss).
  int64_t num_predicted_tokens = 0;
  /// Local tokens that are real, not padding. Summed over the SP ranks of a
  /// group: the sum of sequence_tokens.
  int64_t num_real_tokens = 0;

  int64_t num_local_tokens() const;
};

/// Cuts `sequences` (token ids, each non-empty) into the slice of SP rank
/// `sp_rank` of `sp_size`. INVALID_ARGUMENT for an empty sequence or a bad
/// rank or size.
absl::StatusOr<PackedShard> ShardPackedSequences(
    const std::vector<std::vector<int64_t>>& sequences, int sp_rank,
    int sp_size);

struct GptModelOptions {
  /// Seeds the initial weights; equal seeds give identical weights.
  uint64_t seed = 0;
  /// Parameter and activation dtype. CPU tests use float32 (the gradient
  /// equivalence checks assume it); bf16/fp16 are accepted but untested.
  torch::Dtype dtype = torch::kFloat32;
  torch::Device device = torch::kCPU;
  /// Standard deviation of the normal initialisation of the matrices.
  double init_std = 0.02;
  double rms_norm_epsilon = 1e-5;
  /// Rotary embedding base.
  double rope_theta = 10000.0;
};

namespace gpt_internal {
struct ForwardContext;
}  // namespace gpt_internal

/// A [rows, cols] float32 matrix on the CPU drawn from N(0, std_dev^2) by
/// `generator`: how the models draw their initial weights.
torch::Tensor NormalMatrix(int64_t rows, int64_t cols, double std_dev,
                           at::Generator& generator);

/// `values` as a 1-D int64 tensor on the CPU: the index tensors of a shard.
torch::Tensor Int64Tensor(const std::vector<int64_t>& values);

/// Moves every parameter of `model` to `device` and `dtype` in place. The
/// models draw their weights in float32 on the CPU, then move them, so that
/// a seed gives the same weights whatever the device and dtype.
void MoveParameters(torch::nn::Module& model, const torch::Device& device,
                    torch::Dtype dtype);

/// How many of a model's first `num_layers` layers a forward recomputes when
/// asked for `checkpointed_layers`: that count clamped to [0, num_layers].
int RecomputedLayerCount(int checkpointed_layers, size_t num_layers);

/// OK when Ulysses over `sp_size` ranks can shard the heads of `spec`
/// (sp_size divides num_attention_heads); INVALID_ARGUMENT saying so
/// otherwise. What GptModel and DitModel check for an SP size.
absl::Status CheckUlyssesSize(const ModelSpec& spec, int sp_size);

/// INVALID_ARGUMENT unless 0 <= sp_rank < sp_size: the rank a shard is cut
/// for.
absl::Status CheckShardRank(int sp_rank, int sp_size);

/// INVALID_ARGUMENT unless every sequence i of a shard has
/// sequence_tokens[i] >= 1 real tokens cut into slice_tokens[i] =
/// ceil(sequence_tokens[i] / sp_size) per rank, the error naming
/// `shard_function` (the function that cuts shards of this kind). The two
/// lists have one entry per sequence.
absl::Status CheckSliceTokens(const std::vector<int64_t>& slice_tokens,
                              const std::vector<int64_t>& sequence_tokens,
                              int sp_size, const char* shard_function);

/// What the blocks of GptModel and DitModel share: the Q, K, V and output
/// projections of grouped-query attention, Ulysses attention over them, and
/// the block's parameters in the order it made them (what recompute takes).
/// Its public parts are what the profiler times of a block's own code.
///
/// Not thread-safe.
class AttentionBlock : public torch::nn::Module {
 public:
  /// Q [T, heads, head_dim], K and V [T, kv_heads, head_dim] of the block's
  /// input to attention h [T, hidden] (normed or modulated tokens).
  struct Projections {
    torch::Tensor q;
    torch::Tensor k;
    torch::Tensor v;
  };
  Projections ProjectQkv(const torch::Tensor& h) const;
  /// The output projection of attention [T, hidden] (heads concatenated).
  torch::Tensor ProjectOutput(const torch::Tensor& attention) const;

  const std::vector<torch::Tensor>& layer_parameters() const {
    return parameters_;
  }

 protected:
  /// The head counts and widths of `spec`; no parameters yet.
  explicit AttentionBlock(const ModelSpec& spec);

  /// Registers `value` as parameter `name`, appended to layer_parameters().
  torch::Tensor Register(const std::string& name, torch::Tensor value);
  /// Draws wq, wk, wv (std `init_std`) and wo (std `output_std`) from
  /// `generator` and registers them, in that order.
  void RegisterProjections(double init_std, double output_std,
                           at::Generator& generator);
  /// UlyssesAttention of q, k and v with this block's heads.
  torch::Tensor SequenceParallelAttention(
      const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
      const SequenceParallelContext& sp,
      const std::vector<int64_t>& slice_tokens,
      const std::vector<int64_t>& sequence_tokens, bool causal) const;

 private:
  int64_t hidden_size_;
  int64_t num_heads_;
  int64_t num_kv_heads_;
  int64_t head_dim_;
  std::vector<torch::Tensor> parameters_;
  torch::Tensor wq_, wk_, wv_, wo_;
};

/// One transformer block of GptModel: RMSNorm -> grouped-query attention
/// with rotary positions (Ulysses over the forward's group) -> residual ->
/// RMSNorm -> SwiGLU MLP -> residual. Its token-local parts are public so
/// that the profiler times the layer's own code; ProjectQkv's projections
/// come before rotary embeddings. Parameters are created float32 on the CPU
/// (move the module to change either).
///
/// Not thread-safe.
class DecoderLayer : public AttentionBlock {
 public:
  /// `spec` must pass GptModel::CheckSpec. Draws the matrices from
  /// `generator` in a fixed order.
  DecoderLayer(const ModelSpec& spec, const GptModelOptions& options,
               at::Generator& generator);

  /// The layer on x [T, hidden] of local tokens.
  torch::Tensor Forward(const torch::Tensor& x,
                        const gpt_internal::ForwardContext& context);

  /// The SwiGLU MLP of normed tokens g [T, hidden]: W_down (silu(W_gate g)
  /// * W_up g).
  torch::Tensor Mlp(const torch::Tensor& g) const;

 private:
  // h: [T, hidden] normed local tokens -> [T, hidden] attention output.
  torch::Tensor Attention(const torch::Tensor& h,
                          const gpt_internal::ForwardContext& context) const;

  bool causal_;
  double epsilon_;
  torch::Tensor attention_norm_, mlp_norm_, w_gate_, w_up_, w_down_;
};

/// A GPT-style causal language model built from a ModelSpec: token
/// embedding; num_layers x [RMSNorm -> grouped-query attention with rotary
/// positions -> residual -> RMSNorm -> SwiGLU MLP -> residual]; final
/// RMSNorm; untied LM head. No biases, no dropout (so recompute is exact).
///
/// Forward takes a packed micro-batch: several sequences concatenated, each
/// with positions restarting at 0 and a block-diagonal causal mask, so no
/// sequence sees another. Attention is Ulysses sequence parallel over the
/// context's group: Q, K and V of the local tokens go through one all-to-all
/// (sequence-sharded, all heads -> all tokens, head-sharded), attention runs
/// on full sequences for the local heads, and an all-to-all brings the
/// output back. Q heads and KV heads are both sharded; when the SP size does
/// not divide num_kv_heads, KV heads are first replicated to
/// lcm(num_kv_heads, sp) (as DeepSpeed-Ulysses does for GQA) so they can be.
///
/// Not thread-safe: one thread runs forward and backward.
class GptModel : public TrainableModel {
 public:
  /// INVALID_ARGUMENT unless the spec is a valid causal, gated-MLP model
  /// with a vocabulary and whole heads (hidden % heads == 0, heads % kv heads
  /// == 0, an even head dimension for rotary embeddings).
  static absl::StatusOr<std::shared_ptr<GptModel>> Create(
      const ModelSpec& spec, const GptModelOptions& options = {});

  /// OK when Create accepts `spec` (see there); INVALID_ARGUMENT naming the
  /// field otherwise. Pure function.
  static absl::Status CheckSpec(const ModelSpec& spec);

  /// OK when Ulysses over `sp_size` ranks can shard this model's heads
  /// (sp_size divides num_attention_heads).
  absl::Status CheckSequenceParallelSize(int sp_size) const override;

  /// Logits [num_local_tokens, vocab] of this rank's shard. The first
  /// `checkpointed_layers` layers (clamped to [0, num_layers]) are
  /// recomputed in backward. Every member of `sp.group` must call this with
  /// the same sequence lengths and checkpointed_layers, then run backward.
  /// Errors: INVALID_ARGUMENT for a shard that does not fit the model or the
  /// group; the collective's own status when an all-to-all fails. An
  /// all-to-all failing during backward throws CollectiveError from
  /// backward().
  absl::StatusOr<torch::Tensor> Forward(const PackedShard& shard,
                                        const SequenceParallelContext& sp,
                                        int checkpointed_layers);

  /// Sum of the token cross-entropies of `logits` against `targets`
  /// (ignoring kIgnoredTarget), as a 0-dim tensor of the logits' dtype.
  static torch::Tensor TokenLossSum(const torch::Tensor& logits,
                                    const torch::Tensor& targets);

  /// TrainableModel: the last token of a sequence predicts nothing.
  int64_t LossTokensOfSequence(int64_t length_tokens) const override {
    return length_tokens - 1;
  }
  /// TrainableModel: ShardPackedSequences of the token ids, Forward and
  /// TokenLossSum.
  absl::StatusOr<ShardLoss> ShardLossSum(
      const std::vector<SequenceInput>& sequences,
      const SequenceParallelContext& sp, int checkpointed_layers) override;

  const ModelSpec& spec() const override { return spec_; }
  const GptModelOptions& options() const { return options_; }

 private:
  GptModel(const ModelSpec& spec, const GptModelOptions& options);

  ModelSpec spec_;
  GptModelOptions options_;
  torch::Tensor embedding_;  // [vocab, hidden]
  std::vector<std::shared_ptr<DecoderLayer>> layers_;
  torch::Tensor final_norm_;  // [hidden]
  torch::Tensor lm_head_;     // [vocab, hidden]
};

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_MODEL_H_
