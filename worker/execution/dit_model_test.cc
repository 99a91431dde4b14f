#include "worker/execution/dit_model.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/plan.h"
#include "torch/torch.h"
#include "worker/communication/fake_communicator.h"
#include "worker/execution/equivalence_test_support.h"
#include "worker/execution/latent_dataset.h"
#include "worker/execution/model.h"
#include "worker/execution/model_kind.h"
#include "worker/execution/plan_executor.h"
#include "worker/execution/sequence_attention.h"
#include "worker/execution/trainable_model.h"

namespace dcp {
namespace {

using ::dcp::testing::Group;
using ::dcp::testing::MicroBatch;
using ::testing::HasSubstr;

constexpr int64_t kChannels = 16;

ModelSpec TinyDitSpec() {
  absl::StatusOr<ModelSpec> spec = ModelPreset("tiny-dit");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Random modulation unless `zero_init`: every parameter then has a gradient.
std::shared_ptr<DitModel> TinyDit(bool zero_init = false, uint64_t seed = 5,
                                  ModelSpec spec = TinyDitSpec()) {
  DitModelOptions options;
  options.seed = seed;
  options.latent_channels = kChannels;
  options.zero_init_modulation = zero_init;
  absl::StatusOr<std::shared_ptr<DitModel>> model =
      DitModel::Create(spec, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

LatentSample Sample(int64_t id, int64_t length) {
  static const SyntheticLatentDataset dataset =
      *SyntheticLatentDataset::Create(/*seed=*/3, kChannels);
  return *dataset.Sample(id, length);
}

std::vector<LatentSample> Samples(const std::vector<int64_t>& lengths) {
  std::vector<LatentSample> samples;
  for (size_t i = 0; i < lengths.size(); ++i) {
    samples.push_back(Sample(static_cast<int64_t>(i) + 10, lengths[i]));
  }
  return samples;
}

DitShard Shard(const std::vector<LatentSample>& samples, int rank = 0,
               int size = 1) {
  absl::StatusOr<DitShard> shard =
      ShardLatentSequences(samples, kChannels, rank, size);
  EXPECT_TRUE(shard.ok()) << shard.status();
  return *shard;
}

void ZeroGrads(torch::nn::Module& model) {
  for (auto& p : model.parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

std::map<std::string, torch::Tensor> Gradients(torch::nn::Module& model) {
  std::map<std::string, torch::Tensor> gradients;
  for (const auto& item : model.named_parameters()) {
    gradients[item.key()] = item.value().grad().detach().clone();
  }
  return gradients;
}

// Loss sum and gradients of `samples` packed in one micro-batch.
double LossAndGradients(DitModel& model, const std::vector<LatentSample>& s,
                        int checkpointed_layers,
                        std::map<std::string, torch::Tensor>* gradients) {
  ZeroGrads(model);
  DitShard shard = Shard(s);
  absl::StatusOr<torch::Tensor> predicted =
      model.Forward(shard, SequenceParallelContext{}, checkpointed_layers);
  EXPECT_TRUE(predicted.ok()) << predicted.status();
  torch::Tensor loss = DitModel::VelocityLossSum(*predicted, shard);
  loss.backward();
  *gradients = Gradients(model);
  return loss.item<double>();
}

TEST(DitModelTest, BuildsOnlyDiffusionTransformerSpecs) {
  EXPECT_TRUE(IsDiffusionTransformerSpec(TinyDitSpec()));
  EXPECT_TRUE(IsDiffusionTransformerSpec(*ModelPreset("video-dit-1b")));
  EXPECT_FALSE(IsDiffusionTransformerSpec(*ModelPreset("tiny")));
  // The worker accepts the full-size preset (not built here: 0.7B weights).
  EXPECT_TRUE(DitModel::CheckSpec(*ModelPreset("video-dit-1b")).ok());
  EXPECT_THAT(DitModel::Create(*ModelPreset("tiny")).status().message(),
              HasSubstr("causal = false"));
  ModelSpec with_vocab = TinyDitSpec();
  with_vocab.vocab_size = 8;
  EXPECT_THAT(DitModel::Create(with_vocab).status().message(),
              HasSubstr("vocab_size = 0"));
  DitModelOptions no_channels;
  no_channels.latent_channels = 0;
  EXPECT_EQ(DitModel::Create(TinyDitSpec(), no_channels).status().code(),
            absl::StatusCode::kInvalidArgument);
  // And the GPT refuses the DiT's spec.
  EXPECT_FALSE(GptModel::Create(TinyDitSpec()).ok());
}

TEST(DitModelTest, CreateTrainableModelPicksTheModelOfTheSpec) {
  GptModelOptions options;
  absl::StatusOr<std::shared_ptr<TrainableModel>> dit =
      CreateTrainableModel(TinyDitSpec(), options);
  ASSERT_TRUE(dit.ok()) << dit.status();
  EXPECT_NE(dynamic_cast<DitModel*>(dit->get()), nullptr);
  EXPECT_EQ((*dit)->LossTokensOfSequence(10), 10);
  absl::StatusOr<std::shared_ptr<TrainableModel>> gpt =
      CreateTrainableModel(*ModelPreset("tiny"), options);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  EXPECT_NE(dynamic_cast<GptModel*>(gpt->get()), nullptr);
  EXPECT_EQ((*gpt)->LossTokensOfSequence(10), 9);

  // Each kind reads its own data.
  absl::StatusOr<std::unique_ptr<SequenceInputSource>> latents =
      SequenceInputSource::Open("synthetic:4", **dit);
  ASSERT_TRUE(latents.ok()) << latents.status();
  absl::StatusOr<SequenceInput> input = (*latents)->Input(7, 12);
  ASSERT_TRUE(input.ok()) << input.status();
  EXPECT_TRUE(input->token_ids.empty());
  EXPECT_EQ(input->latent.length_tokens, 12);
  EXPECT_EQ(input->latent.channels,
            dynamic_cast<DitModel&>(**dit).options().latent_channels);
  EXPECT_THAT(
      SequenceInputSource::Open("tokens:/nonexistent", **dit).status().message(),
      HasSubstr("latent patches"));
  absl::StatusOr<std::unique_ptr<SequenceInputSource>> tokens =
      SequenceInputSource::Open("synthetic:4", **gpt);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ((*tokens)->Input(7, 12)->token_ids.size(), 12u);
}

TEST(DitModelTest, ShardsLatentSequencesIntoPaddedContiguousSlices) {
  const std::vector<LatentSample> samples = Samples({5, 3});
  // SP 2: slices of 3 and 2 tokens; rank 1 holds positions 3..5 and 2..3.
  DitShard shard = Shard(samples, /*rank=*/1, /*size=*/2);
  EXPECT_EQ(shard.slice_tokens, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(shard.sequence_tokens, (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(shard.num_local_tokens(), 5);
  EXPECT_EQ(shard.num_real_tokens, 3);
  EXPECT_TRUE(torch::equal(shard.positions,
                           torch::tensor({3, 4, 5, 2, 3}, torch::kInt64)));
  EXPECT_TRUE(torch::equal(shard.sequence_of_token,
                           torch::tensor({0, 0, 0, 1, 1}, torch::kInt64)));
  EXPECT_TRUE(torch::equal(shard.loss_weights,
                           torch::tensor({1.f, 1.f, 0.f, 1.f, 0.f})));
  // The rectified-flow mix and velocity of a real token (sample 0, p = 4).
  const LatentSample& first = samples[0];
  const double t = first.timestep;
  for (int64_t c = 0; c < kChannels; ++c) {
    const double x0 = first.clean[4 * kChannels + c];
    const double eps = first.noise[4 * kChannels + c];
    EXPECT_NEAR(shard.noisy_latents[1][c].item<double>(),
                (1 - t) * x0 + t * eps, 1e-6);
    EXPECT_NEAR(shard.target_velocity[1][c].item<double>(), eps - x0, 1e-6);
  }
  EXPECT_EQ(shard.noisy_latents[2].abs().sum().item<double>(), 0.0);
  // Bad inputs are named.
  EXPECT_FALSE(ShardLatentSequences(samples, kChannels + 1, 0, 1).ok());
  EXPECT_FALSE(ShardLatentSequences(samples, kChannels, 2, 2).ok());
}

TEST(DitModelTest, PredictsOneVelocityPerLocalToken) {
  std::shared_ptr<DitModel> model = TinyDit();
  DitShard shard = Shard(Samples({6, 9, 1}));
  absl::StatusOr<torch::Tensor> predicted =
      model->Forward(shard, SequenceParallelContext{}, 0);
  ASSERT_TRUE(predicted.ok()) << predicted.status();
  EXPECT_EQ(predicted->sizes(), torch::IntArrayRef({16, kChannels}));
  EXPECT_TRUE(torch::isfinite(*predicted).all().item<bool>());
  // A shard cut for another SP size is refused, not misread.
  DitShard other = Shard(Samples({6, 9, 1}), 0, 2);
  EXPECT_EQ(model->Forward(other, SequenceParallelContext{}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// adaLN-Zero: zero modulation makes every block the identity, so the
// prediction is the final layer applied to the embedded input alone.
TEST(DitModelTest, ZeroInitialisedModulationMakesEveryBlockTheIdentity) {
  for (bool zero_init : {true, false}) {
    std::shared_ptr<DitModel> model = TinyDit(zero_init);
    torch::Tensor output;
    torch::Tensor patch_embedding;
    for (const auto& item : model->named_parameters()) {
      if (item.key() == "output") output = item.value();
      if (item.key() == "patch_embedding") patch_embedding = item.value();
      if (zero_init && item.key().find("modulation") != std::string::npos) {
        EXPECT_EQ(item.value().abs().max().item<double>(), 0.0) << item.key();
      }
    }
    ASSERT_TRUE(output.defined() && patch_embedding.defined());
    {
      torch::NoGradGuard no_grad;
      output.normal_(0.0, 0.5);  // So that the prediction is not just 0.
    }
    DitShard shard = Shard(Samples({7, 4}));
    torch::NoGradGuard no_grad;
    torch::Tensor predicted =
        *model->Forward(shard, SequenceParallelContext{}, 0);
    // Embedded input: patches plus the sinusoidal position embedding.
    const int64_t h = model->spec().hidden_size;
    torch::Tensor exponents =
        torch::arange(h / 2, torch::kFloat64) / static_cast<double>(h / 2);
    torch::Tensor angles = shard.positions.to(torch::kFloat64).unsqueeze(1) *
                           torch::pow(10000.0, -exponents).unsqueeze(0);
    torch::Tensor x =
        torch::matmul(shard.noisy_latents, patch_embedding.t()) +
        torch::cat({angles.cos(), angles.sin()}, 1).to(torch::kFloat32);
    torch::Tensor expected = torch::matmul(
        torch::layer_norm(x, {h}, {}, {}, model->options().layer_norm_epsilon),
        output.t());
    const double difference = (predicted - expected).abs().max().item<double>();
    if (zero_init) {
      EXPECT_LT(difference, 1e-5);
    } else {
      EXPECT_GT(difference, 1e-3);  // The check can fail.
    }
  }
}

// A direct DiT, written for clarity: each sequence alone, the attention
// score matrix materialised, the modulation broadcast by hand.
torch::Tensor ReferenceLossSum(DitModel& model,
                               const std::vector<LatentSample>& samples) {
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : model.named_parameters()) {
    p[item.key()] = item.value();
  }
  const ModelSpec& spec = model.spec();
  const int64_t h = spec.hidden_size;
  const int64_t heads = spec.num_attention_heads;
  const int64_t d = spec.HeadDim();
  const double eps = model.options().layer_norm_epsilon;
  auto norm = [&](const torch::Tensor& x) {
    torch::Tensor mean = x.mean(-1, true);
    torch::Tensor var = (x - mean).pow(2).mean(-1, true);
    return (x - mean) / torch::sqrt(var + eps);
  };
  torch::Tensor total = torch::zeros({}, torch::kFloat32);
  for (const LatentSample& sample : samples) {
    const int64_t L = sample.length_tokens;
    DitShard alone = Shard({sample});
    // Timestep embedding.
    const int64_t half = model.options().timestep_features / 2;
    torch::Tensor freq = torch::pow(
        10000.0, -torch::arange(half, torch::kFloat64) / static_cast<double>(half));
    torch::Tensor angle = sample.timestep * 1000.0 * freq;
    torch::Tensor features =
        torch::cat({angle.cos(), angle.sin()}).to(torch::kFloat32);
    torch::Tensor c = torch::matmul(
        p["timestep_out"],
        torch::silu(torch::matmul(p["timestep_in"], features)));  // [h]
    torch::Tensor pos_angle =
        torch::arange(L, torch::kFloat64).unsqueeze(1) *
        torch::pow(10000.0, -torch::arange(h / 2, torch::kFloat64) /
                                static_cast<double>(h / 2))
            .unsqueeze(0);
    torch::Tensor x =
        torch::matmul(alone.noisy_latents, p["patch_embedding"].t()) +
        torch::cat({pos_angle.cos(), pos_angle.sin()}, 1).to(torch::kFloat32);
    for (int l = 0; l < spec.num_layers; ++l) {
      const std::string b = "block" + std::to_string(l) + ".";
      torch::Tensor m =
          torch::matmul(p[b + "modulation"], torch::silu(c)).view({6, h});
      torch::Tensor hn = norm(x) * (1 + m[1]) + m[0];
      torch::Tensor q = torch::matmul(hn, p[b + "wq"].t())
                            .view({L, heads, d}).transpose(0, 1);
      torch::Tensor k = torch::matmul(hn, p[b + "wk"].t())
                            .view({L, heads, d}).transpose(0, 1);
      torch::Tensor v = torch::matmul(hn, p[b + "wv"].t())
                            .view({L, heads, d}).transpose(0, 1);
      torch::Tensor scores =
          torch::matmul(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(d));
      torch::Tensor attention = torch::matmul(torch::softmax(scores, -1), v)
                                    .transpose(0, 1).reshape({L, h});
      x = x + m[2] * torch::matmul(attention, p[b + "wo"].t());
      torch::Tensor g = norm(x) * (1 + m[4]) + m[3];
      torch::Tensor mlp = torch::matmul(
          torch::gelu(torch::matmul(g, p[b + "w_in"].t()), "tanh"),
          p[b + "w_out"].t());
      x = x + m[5] * mlp;
    }
    torch::Tensor f =
        torch::matmul(p["final_modulation"], torch::silu(c)).view({2, h});
    torch::Tensor predicted =
        torch::matmul(norm(x) * (1 + f[1]) + f[0], p["output"].t());
    total = total +
            (predicted - alone.target_velocity).pow(2).mean(-1).sum();
  }
  return total;
}

TEST(DitModelTest, PackedRecomputedGradientsMatchAMaterialisedReference) {
  std::shared_ptr<DitModel> model = TinyDit();
  const std::vector<LatentSample> samples = Samples({9, 4, 13});
  std::map<std::string, torch::Tensor> reference_gradients;
  ZeroGrads(*model);
  torch::Tensor reference = ReferenceLossSum(*model, samples);
  reference.backward();
  reference_gradients = Gradients(*model);
  for (int checkpointed : {0, 1, 2}) {
    std::map<std::string, torch::Tensor> gradients;
    const double loss =
        LossAndGradients(*model, samples, checkpointed, &gradients);
    EXPECT_NEAR(loss, reference.item<double>(), 1e-5) << checkpointed;
    for (const auto& [name, gradient] : reference_gradients) {
      EXPECT_GT(gradient.abs().max().item<double>(), 0) << name;
      EXPECT_LT((gradients.at(name) - gradient).abs().max().item<double>(),
                1e-6)
          << name << " with " << checkpointed << " recomputed blocks";
    }
  }
}

TEST(DitModelTest, AttentionCoreMatchesMaterialisedAttentionOverRealKeys) {
  torch::manual_seed(1);
  const int64_t padded = 8, real = 6;
  torch::Tensor q = torch::randn({4, padded, 16});
  torch::Tensor k = torch::randn({2, padded, 16});
  torch::Tensor v = torch::randn({2, padded, 16});
  torch::Tensor out = SequenceAttention(q, k, v, real, /*causal=*/false);
  torch::Tensor kr = k.narrow(1, 0, real).repeat_interleave(2, 0);
  torch::Tensor vr = v.narrow(1, 0, real).repeat_interleave(2, 0);
  torch::Tensor expected = torch::matmul(
      torch::softmax(torch::matmul(q, kr.transpose(1, 2)) / 4.0, -1), vr);
  EXPECT_EQ(out.sizes(), q.sizes());
  EXPECT_LT((out.narrow(1, 0, real) - expected.narrow(1, 0, real))
                .abs()
                .max()
                .item<double>(),
            1e-5);
}

TEST(DitModelTest, PlanExecutorTrainsTheDitAndItsLossFalls) {
  std::shared_ptr<DitModel> model = TinyDit(/*zero_init=*/true);
  FakeCommunicator communicator;
  PlanExecutorOptions options;
  options.learning_rate = 3e-3;
  PlanExecutor executor(model, communicator, options);
  const std::vector<int64_t> lengths = {24, 17, 40, 9};
  int64_t loss_tokens = 0;
  for (int64_t length : lengths) {
    loss_tokens += model->LossTokensOfSequence(length);
  }
  auto inputs_of = [&](int index) {
    SequenceInput input;
    input.latent = Sample(index, lengths.at(index));
    return input;
  };
  Plan plan;
  plan.groups = {Group(
      {0}, {MicroBatch({0, 1}, 1), MicroBatch({2}, 2), MicroBatch({3}, 0)})};
  std::vector<double> losses;
  for (int step = 0; step < 8; ++step) {
    absl::StatusOr<StepResult> result =
        executor.RunStep(plan, inputs_of, loss_tokens);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->micro_batches.size(), 3u);
    EXPECT_EQ(result->micro_batches[0].predicted_tokens, 24 + 17);
    EXPECT_EQ(result->micro_batches[0].real_tokens, 24 + 17);
    losses.push_back(result->global_loss);
  }
  std::printf("DiT losses over 8 steps: %.4f ... %.4f\n", losses.front(),
              losses.back());
  // Velocity targets have a variance near 2; the zero-initialised model
  // predicts 0 at first, and learns.
  EXPECT_GT(losses.front(), 1.0);
  EXPECT_LT(losses.back(), 0.9 * losses.front());

  // Token ids are not a DiT's input.
  auto tokens_of = [](int) { return std::vector<int64_t>{1, 2, 3}; };
  absl::StatusOr<StepResult> wrong = executor.RunStep(plan, tokens_of, 9);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("latent samples"));
}

}  // namespace
}  // namespace dcp
