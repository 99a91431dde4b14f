#include "worker/execution/model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/execution/recompute.h"
#include "worker/execution/sequence_attention.h"

namespace dcp {

namespace gpt_internal {

// What every layer of one forward pass shares: the group, the rotary tables
// of the local tokens and the attention masks of the full sequences. Shared
// by the autograd graph (recompute re-runs layers with it), so immutable.
struct ForwardContext {
  SequenceParallelContext sp;
  // Rotary cos / sin of the local tokens, [num_local_tokens, 1, head_dim/2].
  torch::Tensor rope_cos;
  torch::Tensor rope_sin;
  std::vector<int64_t> slice_tokens;
  // Real (unpadded) tokens of each sequence.
  std::vector<int64_t> sequence_tokens;
};

}  // namespace gpt_internal

using gpt_internal::ForwardContext;

namespace {

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight,
                      double epsilon) {
  torch::Tensor mean_square = x.pow(2).mean(-1, /*keepdim=*/true);
  return x * torch::rsqrt(mean_square + epsilon) * weight;
}

// Rotate-half rotary embedding of x [tokens, heads, head_dim].
torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& cos,
                          const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  torch::Tensor x1 = x.narrow(-1, 0, half);
  torch::Tensor x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

}  // namespace

torch::Tensor NormalMatrix(int64_t rows, int64_t cols, double std_dev,
                           at::Generator& generator) {
  return torch::empty({rows, cols}, torch::kFloat32)
      .normal_(0.0, std_dev, generator);
}

torch::Tensor Int64Tensor(const std::vector<int64_t>& values) {
  return torch::tensor(torch::ArrayRef<int64_t>(values), torch::kInt64);
}

void MoveParameters(torch::nn::Module& model, const torch::Device& device,
                    torch::Dtype dtype) {
  for (auto& p : model.parameters()) {
    p.set_data(p.data().to(device, dtype));
  }
}

int RecomputedLayerCount(int checkpointed_layers, size_t num_layers) {
  return std::max(0, std::min<int>(checkpointed_layers, num_layers));
}

absl::Status CheckUlyssesSize(const ModelSpec& spec, int sp_size) {
  if (sp_size < 1 || spec.num_attention_heads % sp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Ulysses SP size ", sp_size, " must divide num_attention_heads (",
        spec.num_attention_heads, ") of model '", spec.name,
        "'; use an SP size that divides it"));
  }
  return absl::OkStatus();
}

absl::Status CheckShardRank(int sp_rank, int sp_size) {
  if (sp_size < 1 || sp_rank < 0 || sp_rank >= sp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("SP rank ", sp_rank, " of size ", sp_size,
                     " is invalid; need 0 <= rank < size"));
  }
  return absl::OkStatus();
}

absl::Status CheckSliceTokens(const std::vector<int64_t>& slice_tokens,
                              const std::vector<int64_t>& sequence_tokens,
                              int sp_size, const char* shard_function) {
  const int64_t s = sp_size;
  for (size_t i = 0; i < slice_tokens.size(); ++i) {
    const int64_t length = sequence_tokens[i];
    if (length < 1 || (length + s - 1) / s != slice_tokens[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", i, " of ", length, " tokens does not have ",
          slice_tokens[i], " tokens per slice at SP size ", s,
          "; shard it with ", shard_function, " for this group size"));
    }
  }
  return absl::OkStatus();
}

AttentionBlock::AttentionBlock(const ModelSpec& spec)
    : hidden_size_(spec.hidden_size),
      num_heads_(spec.num_attention_heads),
      num_kv_heads_(spec.num_kv_heads),
      head_dim_(spec.HeadDim()) {}

AttentionBlock::Projections AttentionBlock::ProjectQkv(
    const torch::Tensor& h) const {
  const int64_t tokens = h.size(0);
  return {torch::matmul(h, wq_.t()).view({tokens, num_heads_, head_dim_}),
          torch::matmul(h, wk_.t()).view({tokens, num_kv_heads_, head_dim_}),
          torch::matmul(h, wv_.t()).view({tokens, num_kv_heads_, head_dim_})};
}

torch::Tensor AttentionBlock::ProjectOutput(
    const torch::Tensor& attention) const {
  return torch::matmul(attention, wo_.t());
}

torch::Tensor AttentionBlock::Register(const std::string& name,
                                       torch::Tensor value) {
  torch::Tensor p = register_parameter(name, std::move(value));
  parameters_.push_back(p);
  return p;
}

void AttentionBlock::RegisterProjections(double init_std, double output_std,
                                         at::Generator& generator) {
  const int64_t h = hidden_size_;
  const int64_t kv = num_kv_heads_ * head_dim_;
  wq_ = Register("wq", NormalMatrix(h, h, init_std, generator));
  wk_ = Register("wk", NormalMatrix(kv, h, init_std, generator));
  wv_ = Register("wv", NormalMatrix(kv, h, init_std, generator));
  wo_ = Register("wo", NormalMatrix(h, h, output_std, generator));
}

torch::Tensor AttentionBlock::SequenceParallelAttention(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const SequenceParallelContext& sp, const std::vector<int64_t>& slice_tokens,
    const std::vector<int64_t>& sequence_tokens, bool causal) const {
  return UlyssesAttention(q, k, v, num_heads_, num_kv_heads_, head_dim_, sp,
                          slice_tokens, sequence_tokens, causal);
}

DecoderLayer::DecoderLayer(const ModelSpec& spec,
                           const GptModelOptions& options,
                           at::Generator& generator)
    : AttentionBlock(spec),
      causal_(spec.causal),
      epsilon_(options.rms_norm_epsilon) {
  const int64_t h = spec.hidden_size;
  const int64_t f = spec.ffn_hidden_size;
  // Residual-branch outputs are scaled down with depth (GPT-2 style).
  const double out_std =
      options.init_std / std::sqrt(2.0 * std::max(1, spec.num_layers));
  attention_norm_ = Register("attention_norm", torch::ones({h}));
  RegisterProjections(options.init_std, out_std, generator);
  mlp_norm_ = Register("mlp_norm", torch::ones({h}));
  w_gate_ = Register("w_gate", NormalMatrix(f, h, options.init_std, generator));
  w_up_ = Register("w_up", NormalMatrix(f, h, options.init_std, generator));
  w_down_ = Register("w_down", NormalMatrix(h, f, out_std, generator));
}

torch::Tensor DecoderLayer::Forward(const torch::Tensor& x,
                                    const ForwardContext& context) {
  torch::Tensor h = RmsNorm(x, attention_norm_, epsilon_);
  torch::Tensor y = x + ProjectOutput(Attention(h, context));
  return y + Mlp(RmsNorm(y, mlp_norm_, epsilon_));
}

torch::Tensor DecoderLayer::Mlp(const torch::Tensor& g) const {
  torch::Tensor mlp =
      torch::silu(torch::matmul(g, w_gate_.t())) * torch::matmul(g, w_up_.t());
  return torch::matmul(mlp, w_down_.t());
}

torch::Tensor DecoderLayer::Attention(const torch::Tensor& h,
                                      const ForwardContext& context) const {
  Projections projections = ProjectQkv(h);
  torch::Tensor q =
      ApplyRotary(projections.q, context.rope_cos, context.rope_sin);
  torch::Tensor k =
      ApplyRotary(projections.k, context.rope_cos, context.rope_sin);
  return SequenceParallelAttention(q, k, projections.v, context.sp,
                                   context.slice_tokens,
                                   context.sequence_tokens, causal_);
}

int64_t PackedShard::num_local_tokens() const {
  return std::accumulate(slice_tokens.begin(), slice_tokens.end(), int64_t{0});
}

absl::StatusOr<PackedShard> ShardPackedSequences(
    const std::vector<std::vector<int64_t>>& sequences, int sp_rank,
    int sp_size) {
  DCP_RETURN_IF_ERROR(CheckShardRank(sp_rank, sp_size));
  PackedShard shard;
  std::vector<int64_t> ids, positions, targets;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const std::vector<int64_t>& tokens = sequences[i];
    const int64_t length = static_cast<int64_t>(tokens.size());
    if (length == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i,
                       " of the micro-batch has no tokens; every packed "
                       "sequence needs at least one"));
    }
    const int64_t slice = (length + sp_size - 1) / sp_size;
    shard.slice_tokens.push_back(slice);
    shard.sequence_tokens.push_back(length);
    for (int64_t p = sp_rank * slice; p < (sp_rank + 1) * slice; ++p) {
      const bool real = p < length;
      if (real) ++shard.num_real_tokens;
      ids.push_back(real ? tokens[p] : 0);
      positions.push_back(p);
      const bool predicts = p + 1 < length;
      targets.push_back(predicts ? tokens[p + 1] : kIgnoredTarget);
      if (predicts) ++shard.num_predicted_tokens;
    }
  }
  shard.token_ids = Int64Tensor(ids);
  shard.positions = Int64Tensor(positions);
  shard.targets = Int64Tensor(targets);
  return shard;
}

GptModel::GptModel(const ModelSpec& spec, const GptModelOptions& options)
    : spec_(spec), options_(options) {
  at::Generator generator =
      at::make_generator<at::CPUGeneratorImpl>(options.seed);
  const int64_t h = spec.hidden_size;
  const int64_t vocab = spec.vocab_size;
  // Initialised on the CPU in float32 from one generator, in a fixed order,
  // then moved: the same seed gives the same weights whatever the dtype.
  embedding_ = register_parameter(
      "embedding", NormalMatrix(vocab, h, options.init_std, generator));
  for (int i = 0; i < spec.num_layers; ++i) {
    auto layer = std::make_shared<DecoderLayer>(spec, options, generator);
    register_module(absl::StrCat("layer", i), layer);
    layers_.push_back(std::move(layer));
  }
  final_norm_ = register_parameter("final_norm", torch::ones({h}));
  lm_head_ = register_parameter(
      "lm_head", NormalMatrix(vocab, h, options.init_std, generator));
  MoveParameters(*this, options.device, options.dtype);
}

absl::StatusOr<std::shared_ptr<GptModel>> GptModel::Create(
    const ModelSpec& spec, const GptModelOptions& options) {
  DCP_RETURN_IF_ERROR(CheckSpec(spec));
  return std::shared_ptr<GptModel>(new GptModel(spec, options));
}

absl::Status GptModel::CheckSpec(const ModelSpec& spec) {
  DCP_RETURN_IF_ERROR(ValidateModelSpec(spec));
  if (spec.vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", spec.name, "' has vocab_size ", spec.vocab_size,
        "; the GPT model needs a vocabulary (set vocab_size > 0)"));
  }
  if (!spec.causal || !spec.gated_mlp || spec.adaln_modulation) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", spec.name,
        "' is not a GPT-style decoder; GptModel needs causal = true, "
        "gated_mlp = true and adaln_modulation = false"));
  }
  if (spec.num_attention_heads <= 0 || spec.num_kv_heads <= 0 ||
      spec.hidden_size % spec.num_attention_heads != 0 ||
      spec.num_attention_heads % spec.num_kv_heads != 0 ||
      spec.HeadDim() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", spec.name, "': hidden_size ", spec.hidden_size,
        ", num_attention_heads ", spec.num_attention_heads, ", num_kv_heads ",
        spec.num_kv_heads,
        " do not give whole heads; need hidden_size % heads == 0, heads % "
        "kv_heads == 0 and an even head dimension (rotary embeddings)"));
  }
  return absl::OkStatus();
}

absl::Status GptModel::CheckSequenceParallelSize(int sp_size) const {
  return CheckUlyssesSize(spec_, sp_size);
}

absl::StatusOr<torch::Tensor> GptModel::Forward(
    const PackedShard& shard, const SequenceParallelContext& sp,
    int checkpointed_layers) {
  DCP_RETURN_IF_ERROR(CheckSequenceParallelSize(sp.size()));
  const int64_t tokens = shard.num_local_tokens();
  if (shard.slice_tokens.size() != shard.sequence_tokens.size() ||
      !shard.token_ids.defined() || shard.token_ids.dim() != 1 ||
      shard.token_ids.size(0) != tokens || !shard.positions.defined() ||
      shard.positions.sizes() != shard.token_ids.sizes()) {
    return absl::InvalidArgumentError(
        "packed shard is inconsistent: token_ids and positions must be 1-D "
        "with one entry per local token (sum of slice_tokens); build it with "
        "ShardPackedSequences");
  }
  if (tokens == 0) {
    return absl::InvalidArgumentError(
        "packed shard has no tokens; a micro-batch needs at least one "
        "sequence");
  }
  DCP_RETURN_IF_ERROR(CheckSliceTokens(shard.slice_tokens,
                                       shard.sequence_tokens, sp.size(),
                                       "ShardPackedSequences"));
  if (shard.token_ids.numel() > 0) {
    const int64_t lowest = shard.token_ids.min().item<int64_t>();
    const int64_t highest = shard.token_ids.max().item<int64_t>();
    if (lowest < 0 || highest >= spec_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ids must be in [0, ", spec_.vocab_size, ") for model '",
          spec_.name, "'; got a token in [", lowest, ", ", highest, "]"));
    }
  }

  auto context = std::make_shared<ForwardContext>();
  context->sp = sp;
  context->slice_tokens = shard.slice_tokens;
  const torch::TensorOptions float_options =
      torch::TensorOptions().dtype(options_.dtype).device(options_.device);
  {
    // Rotary tables in float64, then cast: identical for a position wherever
    // its token lands.
    const int64_t half = spec_.HeadDim() / 2;
    torch::Tensor exponents =
        torch::arange(half, torch::kFloat64) * (2.0 / spec_.HeadDim());
    torch::Tensor inverse_frequency =
        torch::pow(options_.rope_theta, -exponents);
    torch::Tensor angles = shard.positions.to(torch::kFloat64).unsqueeze(1) *
                           inverse_frequency.unsqueeze(0);
    context->rope_cos = angles.cos().unsqueeze(1).to(float_options);
    context->rope_sin = angles.sin().unsqueeze(1).to(float_options);
  }
  context->sequence_tokens = shard.sequence_tokens;

  const int recomputed =
      RecomputedLayerCount(checkpointed_layers, layers_.size());
  try {
    torch::Tensor x =
        torch::embedding(embedding_, shard.token_ids.to(options_.device));
    for (size_t l = 0; l < layers_.size(); ++l) {
      std::shared_ptr<DecoderLayer> layer = layers_[l];
      if (static_cast<int>(l) < recomputed) {
        // The closure owns the layer and context: recompute outlives Forward.
        x = CheckpointedForward(
            [layer, context](const torch::Tensor& input) {
              return layer->Forward(input, *context);
            },
            x, layer->layer_parameters());
      } else {
        x = layer->Forward(x, *context);
      }
    }
    x = RmsNorm(x, final_norm_, options_.rms_norm_epsilon);
    return torch::matmul(x, lm_head_.t());
  } catch (...) {
    return StatusFromCurrentException("GptModel forward");
  }
}

torch::Tensor GptModel::TokenLossSum(const torch::Tensor& logits,
                                     const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(
      logits, targets.to(logits.device()),
      torch::nn::functional::CrossEntropyFuncOptions()
          .ignore_index(kIgnoredTarget)
          .reduction(torch::kSum));
}

absl::StatusOr<ShardLoss> GptModel::ShardLossSum(
    const std::vector<SequenceInput>& sequences,
    const SequenceParallelContext& sp, int checkpointed_layers) {
  std::vector<std::vector<int64_t>> token_ids;
  token_ids.reserve(sequences.size());
  for (const SequenceInput& sequence : sequences) {
    token_ids.push_back(sequence.token_ids);
  }
  absl::StatusOr<PackedShard> shard =
      ShardPackedSequences(token_ids, sp.rank(), sp.size());
  if (!shard.ok()) return shard.status();
  absl::StatusOr<torch::Tensor> logits =
      Forward(*shard, sp, checkpointed_layers);
  if (!logits.ok()) return logits.status();
  ShardLoss loss;
  loss.local_tokens = shard->num_local_tokens();
  loss.loss_tokens = shard->num_predicted_tokens;
  loss.real_tokens = shard->num_real_tokens;
  try {
    loss.loss_sum = TokenLossSum(*logits, shard->targets);
  } catch (...) {
    return StatusFromCurrentException("GptModel loss");
  }
  return loss;
}

}  // namespace dcp
