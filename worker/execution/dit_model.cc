#include "worker/execution/dit_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/execution/model.h"
#include "worker/execution/recompute.h"

namespace dcp {

namespace dit_internal {

// What every block of one forward pass shares; immutable once made, because
// recompute re-runs blocks with it from backward.
struct ForwardContext {
  SequenceParallelContext sp;
  std::vector<int64_t> slice_tokens;
  std::vector<int64_t> sequence_tokens;
  // The micro-batch sequence of each local token, int64 on the device.
  torch::Tensor sequence_of_token;
};

}  // namespace dit_internal

using dit_internal::ForwardContext;

namespace {

torch::Tensor LayerNormWithoutWeights(const torch::Tensor& x, double epsilon) {
  return torch::layer_norm(x, {x.size(-1)}, /*weight=*/{}, /*bias=*/{},
                           epsilon);
}

// Sinusoidal features of `values` [n] (float64): [n, width], cos then sin
// of values * max_period^(-i / (width / 2)).
torch::Tensor SinusoidalFeatures(const torch::Tensor& values, int64_t width,
                                 double max_period) {
  const int64_t half = width / 2;
  torch::Tensor exponents =
      torch::arange(half, torch::kFloat64) / static_cast<double>(half);
  torch::Tensor frequencies = torch::pow(max_period, -exponents);
  torch::Tensor angles =
      values.to(torch::kFloat64).unsqueeze(1) * frequencies.unsqueeze(0);
  return torch::cat({angles.cos(), angles.sin()}, /*dim=*/1);
}

}  // namespace

bool IsDiffusionTransformerSpec(const ModelSpec& spec) {
  return !spec.causal && spec.adaln_modulation;
}

int64_t DitShard::num_local_tokens() const {
  return std::accumulate(slice_tokens.begin(), slice_tokens.end(), int64_t{0});
}

absl::StatusOr<DitShard> ShardLatentSequences(
    const std::vector<LatentSample>& samples, int64_t channels, int sp_rank,
    int sp_size) {
  DCP_RETURN_IF_ERROR(CheckShardRank(sp_rank, sp_size));
  DitShard shard;
  std::vector<float> noisy, target, weights;
  std::vector<int64_t> positions, sequence_of_token;
  std::vector<double> timesteps;
  for (size_t i = 0; i < samples.size(); ++i) {
    const LatentSample& sample = samples[i];
    const int64_t length = sample.length_tokens;
    if (length < 1 || sample.channels != channels ||
        static_cast<int64_t>(sample.clean.size()) != length * channels ||
        static_cast<int64_t>(sample.noise.size()) != length * channels) {
      return absl::InvalidArgumentError(absl::StrCat(
          "latent sample ", i, " of the micro-batch has ", length,
          " tokens of ", sample.channels, " numbers (", sample.clean.size(),
          " clean, ", sample.noise.size(), " noise); the model needs >= 1 "
          "token of ", channels, " numbers, clean and noise of length x ",
          channels));
    }
    const double t = sample.timestep;
    const int64_t slice = (length + sp_size - 1) / sp_size;
    shard.slice_tokens.push_back(slice);
    shard.sequence_tokens.push_back(length);
    timesteps.push_back(t);
    for (int64_t p = sp_rank * slice; p < (sp_rank + 1) * slice; ++p) {
      const bool real = p < length;
      if (real) ++shard.num_real_tokens;
      positions.push_back(p);
      sequence_of_token.push_back(static_cast<int64_t>(i));
      weights.push_back(real ? 1.0f : 0.0f);
      for (int64_t c = 0; c < channels; ++c) {
        const double x0 = real ? sample.clean[p * channels + c] : 0.0;
        const double eps = real ? sample.noise[p * channels + c] : 0.0;
        noisy.push_back(static_cast<float>((1.0 - t) * x0 + t * eps));
        target.push_back(static_cast<float>(eps - x0));
      }
    }
  }
  const int64_t tokens = static_cast<int64_t>(positions.size());
  auto floats = [](const std::vector<float>& values) {
    return torch::tensor(torch::ArrayRef<float>(values), torch::kFloat32);
  };
  shard.noisy_latents = floats(noisy).view({tokens, channels});
  shard.target_velocity = floats(target).view({tokens, channels});
  shard.loss_weights = floats(weights);
  shard.positions = Int64Tensor(positions);
  shard.sequence_of_token = Int64Tensor(sequence_of_token);
  shard.timesteps =
      torch::tensor(torch::ArrayRef<double>(timesteps), torch::kFloat64);
  return shard;
}

DitBlock::DitBlock(const ModelSpec& spec, const DitModelOptions& options,
                   at::Generator& generator)
    : AttentionBlock(spec),
      gated_mlp_(spec.gated_mlp),
      epsilon_(options.layer_norm_epsilon) {
  const int64_t h = spec.hidden_size;
  const int64_t f = spec.ffn_hidden_size;
  auto matrix = [&](int64_t rows, int64_t cols) {
    return NormalMatrix(rows, cols, options.init_std, generator);
  };
  // Drawn even when zeroed, so that both settings draw the other matrices
  // from the same stream.
  torch::Tensor modulation = matrix(6 * h, h);
  if (options.zero_init_modulation) modulation.zero_();
  modulation_ = Register("modulation", modulation);
  RegisterProjections(options.init_std, /*output_std=*/options.init_std,
                      generator);
  w_in_ = Register("w_in", matrix(f, h));
  if (gated_mlp_) w_gate_ = Register("w_gate", matrix(f, h));
  w_out_ = Register("w_out", matrix(h, f));
}

torch::Tensor DitBlock::Modulation(const torch::Tensor& conditioning) const {
  return torch::matmul(torch::silu(conditioning), modulation_.t());
}

torch::Tensor DitBlock::Forward(const torch::Tensor& x,
                                const torch::Tensor& conditioning,
                                const ForwardContext& context) const {
  // Per sequence, then per token: [T, 6, hidden] (x is [T, hidden]).
  torch::Tensor modulation =
      Modulation(conditioning)
          .index_select(0, context.sequence_of_token)
          .view({x.size(0), 6, x.size(1)});
  auto part = [&](int64_t i) { return modulation.select(1, i); };
  torch::Tensor h =
      LayerNormWithoutWeights(x, epsilon_) * (1 + part(1)) + part(0);
  torch::Tensor y = x + part(2) * ProjectOutput(Attention(h, context));
  torch::Tensor g =
      LayerNormWithoutWeights(y, epsilon_) * (1 + part(4)) + part(3);
  return y + part(5) * Mlp(g);
}

torch::Tensor DitBlock::Mlp(const torch::Tensor& g) const {
  torch::Tensor inner = torch::matmul(g, w_in_.t());
  if (gated_mlp_) {
    inner = torch::silu(torch::matmul(g, w_gate_.t())) * inner;
  } else {
    inner = torch::gelu(inner, "tanh");
  }
  return torch::matmul(inner, w_out_.t());
}

torch::Tensor DitBlock::Attention(const torch::Tensor& h,
                                  const ForwardContext& context) const {
  Projections projections = ProjectQkv(h);
  return SequenceParallelAttention(projections.q, projections.k, projections.v,
                                   context.sp, context.slice_tokens,
                                   context.sequence_tokens, /*causal=*/false);
}

DitModel::DitModel(const ModelSpec& spec, const DitModelOptions& options)
    : spec_(spec), options_(options) {
  at::Generator generator =
      at::make_generator<at::CPUGeneratorImpl>(options.seed);
  const int64_t h = spec.hidden_size;
  const int64_t c = options.latent_channels;
  auto matrix = [&](int64_t rows, int64_t cols) {
    return NormalMatrix(rows, cols, options.init_std, generator);
  };
  // Float32 on the CPU from one generator in a fixed order, then moved.
  patch_embedding_ = register_parameter("patch_embedding", matrix(h, c));
  timestep_in_ =
      register_parameter("timestep_in", matrix(h, options.timestep_features));
  timestep_out_ = register_parameter("timestep_out", matrix(h, h));
  for (int i = 0; i < spec.num_layers; ++i) {
    auto block = std::make_shared<DitBlock>(spec, options, generator);
    register_module(absl::StrCat("block", i), block);
    blocks_.push_back(std::move(block));
  }
  torch::Tensor final_modulation = matrix(2 * h, h);
  torch::Tensor output = matrix(c, h);
  if (options.zero_init_modulation) {
    final_modulation.zero_();
    output.zero_();
  }
  final_modulation_ = register_parameter("final_modulation", final_modulation);
  output_ = register_parameter("output", output);
  MoveParameters(*this, options.device, options.dtype);
}

absl::StatusOr<std::shared_ptr<DitModel>> DitModel::Create(
    const ModelSpec& spec, const DitModelOptions& options) {
  DCP_RETURN_IF_ERROR(CheckSpec(spec));
  if (options.latent_channels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DitModelOptions.latent_channels = ",
                     options.latent_channels, " must be at least 1"));
  }
  if (options.timestep_features < 2 || options.timestep_features % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DitModelOptions.timestep_features = ", options.timestep_features,
        " must be even and at least 2 (cosine and sine features)"));
  }
  return std::shared_ptr<DitModel>(new DitModel(spec, options));
}

absl::Status DitModel::CheckSpec(const ModelSpec& spec) {
  DCP_RETURN_IF_ERROR(ValidateModelSpec(spec));
  if (!IsDiffusionTransformerSpec(spec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", spec.name,
        "' is not a diffusion transformer; DitModel needs causal = false and "
        "adaln_modulation = true"));
  }
  if (spec.vocab_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", spec.name, "' has vocab_size ", spec.vocab_size,
        "; a DiT reads latent patches, not tokens: set vocab_size = 0"));
  }
  return absl::OkStatus();
}

absl::Status DitModel::CheckSequenceParallelSize(int sp_size) const {
  return CheckUlyssesSize(spec_, sp_size);
}

torch::Tensor DitModel::TimestepEmbedding(
    const torch::Tensor& timesteps) const {
  // DiT's convention: t scaled to [0, 1000) before the features.
  const torch::Tensor features =
      SinusoidalFeatures(timesteps * 1000.0, options_.timestep_features,
                         /*max_period=*/10000.0)
          .to(timestep_in_.options());
  return torch::matmul(torch::silu(torch::matmul(features, timestep_in_.t())),
                       timestep_out_.t());
}

absl::StatusOr<torch::Tensor> DitModel::Forward(
    const DitShard& shard, const SequenceParallelContext& sp,
    int checkpointed_layers) {
  DCP_RETURN_IF_ERROR(CheckSequenceParallelSize(sp.size()));
  const int64_t tokens = shard.num_local_tokens();
  const int64_t num_sequences = static_cast<int64_t>(shard.slice_tokens.size());
  if (tokens == 0 ||
      shard.sequence_tokens.size() != shard.slice_tokens.size() ||
      !shard.noisy_latents.defined() ||
      shard.noisy_latents.sizes() !=
          torch::IntArrayRef({tokens, options_.latent_channels}) ||
      !shard.positions.defined() || shard.positions.numel() != tokens ||
      !shard.sequence_of_token.defined() ||
      shard.sequence_of_token.numel() != tokens ||
      !shard.timesteps.defined() || shard.timesteps.numel() != num_sequences) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DiT shard is inconsistent: it needs at least one token and, per "
        "local token (sum of slice_tokens), a row of ",
        options_.latent_channels,
        " latent numbers, a position and a sequence, plus one timestep per "
        "sequence; build it with ShardLatentSequences"));
  }
  DCP_RETURN_IF_ERROR(CheckSliceTokens(shard.slice_tokens,
                                       shard.sequence_tokens, sp.size(),
                                       "ShardLatentSequences"));
  const torch::TensorOptions float_options =
      torch::TensorOptions().dtype(options_.dtype).device(options_.device);
  auto context = std::make_shared<ForwardContext>();
  context->sp = sp;
  context->slice_tokens = shard.slice_tokens;
  context->sequence_tokens = shard.sequence_tokens;
  context->sequence_of_token = shard.sequence_of_token.to(options_.device);

  const int recomputed =
      RecomputedLayerCount(checkpointed_layers, blocks_.size());
  try {
    // Positions in float64, then cast: a position embeds identically
    // wherever its token lands.
    torch::Tensor position_embedding =
        SinusoidalFeatures(shard.positions, spec_.hidden_size,
                           /*max_period=*/10000.0)
            .to(float_options);
    if (spec_.hidden_size % 2 != 0) {
      position_embedding = torch::constant_pad_nd(position_embedding, {0, 1});
    }
    torch::Tensor x = torch::matmul(shard.noisy_latents.to(float_options),
                                    patch_embedding_.t()) +
                      position_embedding;
    torch::Tensor conditioning =
        TimestepEmbedding(shard.timesteps.to(options_.device));
    for (size_t l = 0; l < blocks_.size(); ++l) {
      std::shared_ptr<DitBlock> block = blocks_[l];
      if (static_cast<int>(l) < recomputed) {
        // The conditioning is an input of its own, so that its gradient
        // leaves the recomputed block through the outer graph.
        x = CheckpointedForwardOfInputs(
            [block, context](const std::vector<torch::Tensor>& inputs) {
              return block->Forward(inputs[0], inputs[1], *context);
            },
            {x, conditioning}, block->layer_parameters());
      } else {
        x = block->Forward(x, conditioning, *context);
      }
    }
    torch::Tensor modulation =
        torch::matmul(torch::silu(conditioning), final_modulation_.t())
            .index_select(0, context->sequence_of_token)
            .view({tokens, 2, spec_.hidden_size});
    torch::Tensor h = LayerNormWithoutWeights(x, options_.layer_norm_epsilon) *
                          (1 + modulation.select(1, 1)) +
                      modulation.select(1, 0);
    return torch::matmul(h, output_.t());
  } catch (...) {
    return StatusFromCurrentException("DitModel forward");
  }
}

torch::Tensor DitModel::VelocityLossSum(const torch::Tensor& predicted,
                                        const DitShard& shard) {
  const torch::Dtype loss_dtype =
      predicted.scalar_type() == torch::kFloat64 ? torch::kFloat64
                                                 : torch::kFloat32;
  torch::Tensor error =
      predicted.to(loss_dtype) -
      shard.target_velocity.to(predicted.device(), loss_dtype);
  torch::Tensor per_token = error.pow(2).mean(/*dim=*/-1);
  return (per_token *
          shard.loss_weights.to(predicted.device(), loss_dtype))
      .sum();
}

absl::StatusOr<ShardLoss> DitModel::ShardLossSum(
    const std::vector<SequenceInput>& sequences,
    const SequenceParallelContext& sp, int checkpointed_layers) {
  std::vector<LatentSample> samples;
  samples.reserve(sequences.size());
  for (size_t i = 0; i < sequences.size(); ++i) {
    if (!sequences[i].token_ids.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", i, " of the micro-batch holds token ids; the DiT '",
          spec_.name, "' reads latent samples (SequenceInput::latent)"));
    }
    samples.push_back(sequences[i].latent);
  }
  absl::StatusOr<DitShard> shard = ShardLatentSequences(
      samples, options_.latent_channels, sp.rank(), sp.size());
  if (!shard.ok()) return shard.status();
  absl::StatusOr<torch::Tensor> predicted =
      Forward(*shard, sp, checkpointed_layers);
  if (!predicted.ok()) return predicted.status();
  ShardLoss loss;
  loss.local_tokens = shard->num_local_tokens();
  loss.loss_tokens = shard->num_real_tokens;
  loss.real_tokens = shard->num_real_tokens;
  try {
    loss.loss_sum = VelocityLossSum(*predicted, *shard);
  } catch (...) {
    return StatusFromCurrentException("DitModel loss");
  }
  return loss;
}

}  // namespace dcp
