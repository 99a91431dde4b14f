#include "worker/execution/model.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"
#include "torch/torch.h"
#include "worker/communication/fake_communicator.h"
#include "worker/execution/plan_executor.h"
#include "worker/execution/recompute.h"

namespace dcp {
namespace {

ModelSpec TinySpec() {
  absl::StatusOr<ModelSpec> spec = ModelPreset("tiny");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

std::shared_ptr<GptModel> TinyModel(uint64_t seed = 7) {
  GptModelOptions options;
  options.seed = seed;
  absl::StatusOr<std::shared_ptr<GptModel>> model =
      GptModel::Create(TinySpec(), options);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

std::vector<int64_t> Tokens(int64_t length, int64_t salt) {
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < length; ++i) {
    tokens.push_back((i * 37 + salt * 101 + 11) % 256);
  }
  return tokens;
}

torch::Tensor Logits(GptModel& model,
                     const std::vector<std::vector<int64_t>>& sequences,
                     int checkpointed_layers = 0) {
  absl::StatusOr<PackedShard> shard =
      ShardPackedSequences(sequences, /*sp_rank=*/0, /*sp_size=*/1);
  EXPECT_TRUE(shard.ok()) << shard.status();
  absl::StatusOr<torch::Tensor> logits =
      model.Forward(*shard, SequenceParallelContext{}, checkpointed_layers);
  EXPECT_TRUE(logits.ok()) << logits.status();
  return *logits;
}

void ZeroGrads(GptModel& model) {
  for (auto& p : model.parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

TEST(GptModelTest, RejectsModelsItCannotBuild) {
  ModelSpec spec = TinySpec();
  spec.vocab_size = 0;
  EXPECT_EQ(GptModel::Create(spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  ModelSpec dit = TinySpec();
  dit.causal = false;
  EXPECT_EQ(GptModel::Create(dit).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GptModelTest, SequenceParallelSizeMustDivideHeads) {
  std::shared_ptr<GptModel> model = TinyModel();
  EXPECT_TRUE(model->CheckSequenceParallelSize(1).ok());
  EXPECT_TRUE(model->CheckSequenceParallelSize(2).ok());
  // 4 > num_kv_heads (2): KV heads are replicated, still allowed.
  EXPECT_TRUE(model->CheckSequenceParallelSize(4).ok());
  EXPECT_EQ(model->CheckSequenceParallelSize(3).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GptModelTest, ShardsSequencesIntoPaddedContiguousSlices) {
  // Lengths 5 and 4 at SP 2: slices of 3 and 2 tokens.
  std::vector<std::vector<int64_t>> sequences = {{10, 11, 12, 13, 14},
                                                 {20, 21, 22, 23}};
  absl::StatusOr<PackedShard> rank0 = ShardPackedSequences(sequences, 0, 2);
  absl::StatusOr<PackedShard> rank1 = ShardPackedSequences(sequences, 1, 2);
  ASSERT_TRUE(rank0.ok() && rank1.ok());
  EXPECT_THAT(rank0->slice_tokens, ::testing::ElementsAre(3, 2));
  EXPECT_THAT(rank0->sequence_tokens, ::testing::ElementsAre(5, 4));
  auto values = [](const torch::Tensor& t) {
    return std::vector<int64_t>(t.data_ptr<int64_t>(),
                                t.data_ptr<int64_t>() + t.numel());
  };
  EXPECT_THAT(values(rank0->token_ids),
              ::testing::ElementsAre(10, 11, 12, 20, 21));
  EXPECT_THAT(values(rank0->positions), ::testing::ElementsAre(0, 1, 2, 0, 1));
  EXPECT_THAT(values(rank0->targets),
              ::testing::ElementsAre(11, 12, 13, 21, 22));
  // Rank 1: padding (token 0, ignored) after sequence 0's last token.
  EXPECT_THAT(values(rank1->token_ids),
              ::testing::ElementsAre(13, 14, 0, 22, 23));
  EXPECT_THAT(values(rank1->positions), ::testing::ElementsAre(3, 4, 5, 2, 3));
  EXPECT_THAT(values(rank1->targets),
              ::testing::ElementsAre(14, kIgnoredTarget, kIgnoredTarget, 23,
                                     kIgnoredTarget));
  EXPECT_EQ(rank0->num_predicted_tokens + rank1->num_predicted_tokens, 4 + 3);
  // Real tokens: 3 + 2 on rank 0, 2 + 2 (one padding token) on rank 1.
  EXPECT_EQ(rank0->num_real_tokens, 5);
  EXPECT_EQ(rank1->num_real_tokens, 4);
  EXPECT_FALSE(ShardPackedSequences({{}}, 0, 1).ok());
  EXPECT_FALSE(ShardPackedSequences(sequences, 2, 2).ok());
}

TEST(GptModelTest, SameSeedSameWeightsOtherSeedOtherWeights) {
  std::shared_ptr<GptModel> a = TinyModel(/*seed=*/3);
  std::shared_ptr<GptModel> b = TinyModel(/*seed=*/3);
  std::shared_ptr<GptModel> c = TinyModel(/*seed=*/4);
  auto pa = a->named_parameters();
  auto pb = b->named_parameters();
  auto pc = c->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  bool any_differs = false;
  for (const auto& item : pa) {
    EXPECT_EQ(item.value().dtype(), torch::kFloat32);
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
    if (!torch::equal(item.value(), pc[item.key()])) any_differs = true;
  }
  EXPECT_TRUE(any_differs);
  std::vector<std::vector<int64_t>> batch = {Tokens(9, 1)};
  EXPECT_TRUE(torch::equal(Logits(*a, batch), Logits(*b, batch)));
}

TEST(GptModelTest, ChangingALaterTokenLeavesEarlierLogitsUnchanged) {
  std::shared_ptr<GptModel> model = TinyModel();
  torch::NoGradGuard no_grad;
  std::vector<int64_t> tokens = Tokens(12, 2);
  torch::Tensor before = Logits(*model, {tokens});
  tokens[8] = (tokens[8] + 1) % 256;
  torch::Tensor after = Logits(*model, {tokens});
  ASSERT_EQ(before.sizes(), (std::vector<int64_t>{12, 256}));
  EXPECT_TRUE(torch::allclose(before.narrow(0, 0, 8), after.narrow(0, 0, 8),
                              /*rtol=*/0, /*atol=*/1e-6));
  EXPECT_FALSE(torch::allclose(before.narrow(0, 8, 4), after.narrow(0, 8, 4),
                               /*rtol=*/0, /*atol=*/1e-6));
}

TEST(GptModelTest, PackedSequencesMatchEachSequenceAlone) {
  std::shared_ptr<GptModel> model = TinyModel();
  torch::NoGradGuard no_grad;
  std::vector<int64_t> first = Tokens(7, 3);
  std::vector<int64_t> second = Tokens(5, 4);
  torch::Tensor packed = Logits(*model, {first, second});
  torch::Tensor first_alone = Logits(*model, {first});
  torch::Tensor second_alone = Logits(*model, {second});
  EXPECT_TRUE(torch::allclose(packed.narrow(0, 0, 7), first_alone,
                              /*rtol=*/0, /*atol=*/1e-5));
  EXPECT_TRUE(torch::allclose(packed.narrow(0, 7, 5), second_alone,
                              /*rtol=*/0, /*atol=*/1e-5));
  // The second sequence restarts at position 0: packing it after the first
  // is not the same as appending its tokens to the first.
  std::vector<int64_t> joined = first;
  joined.insert(joined.end(), second.begin(), second.end());
  torch::Tensor concatenated = Logits(*model, {joined});
  EXPECT_FALSE(torch::allclose(concatenated.narrow(0, 7, 5), second_alone,
                               /*rtol=*/0, /*atol=*/1e-5));
}

TEST(GptModelTest, RecomputeGivesIdenticalLossAndGradients) {
  std::shared_ptr<GptModel> model = TinyModel();
  std::vector<std::vector<int64_t>> batch = {Tokens(10, 5), Tokens(6, 6)};
  absl::StatusOr<PackedShard> shard = ShardPackedSequences(batch, 0, 1);
  ASSERT_TRUE(shard.ok());

  auto loss_and_grads = [&](int checkpointed_layers) {
    ZeroGrads(*model);
    absl::StatusOr<torch::Tensor> logits =
        model->Forward(*shard, SequenceParallelContext{}, checkpointed_layers);
    EXPECT_TRUE(logits.ok()) << logits.status();
    torch::Tensor loss = GptModel::TokenLossSum(*logits, shard->targets) / 14;
    loss.backward();
    std::vector<torch::Tensor> grads;
    for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return std::make_pair(loss.item<double>(), grads);
  };

  auto [reference_loss, reference_grads] = loss_and_grads(0);
  for (int k : {1, 2}) {
    auto [loss, grads] = loss_and_grads(k);
    EXPECT_NEAR(loss, reference_loss, 1e-6) << "k = " << k;
    ASSERT_EQ(grads.size(), reference_grads.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      EXPECT_GT(reference_grads[i].abs().max().item<double>(), 0);
      EXPECT_TRUE(torch::allclose(grads[i], reference_grads[i], /*rtol=*/0,
                                  /*atol=*/1e-6))
          << "k = " << k << ", parameter " << i;
    }
  }
}

TEST(RecomputeTest, ReRunsTheLayerInBackwardAndAccumulatesParameterGrads) {
  torch::Tensor weight = torch::tensor({2.0, 3.0}).requires_grad_(true);
  int runs = 0;
  LayerFunction layer = [&](const torch::Tensor& x) {
    ++runs;
    return (x * weight).sin();
  };
  torch::Tensor input = torch::tensor({0.5, -1.0}).requires_grad_(true);
  torch::Tensor out = CheckpointedForward(layer, input * 1.0, {weight});
  EXPECT_EQ(runs, 1);
  out.sum().backward();
  EXPECT_EQ(runs, 2);
  torch::Tensor expected_input_grad = (input * weight).cos() * weight;
  torch::Tensor expected_weight_grad = (input * weight).cos() * input;
  EXPECT_TRUE(torch::allclose(input.grad(), expected_input_grad.detach()));
  EXPECT_TRUE(torch::allclose(weight.grad(), expected_weight_grad.detach()));

  // The input need not require grad for the parameters to get theirs.
  weight.mutable_grad().zero_();
  CheckpointedForward(layer, torch::tensor({0.5, -1.0}), {weight})
      .sum()
      .backward();
  EXPECT_TRUE(torch::allclose(weight.grad(), expected_weight_grad.detach()));
}

TEST(PlanExecutorTest, SingleRankStepMatchesDirectGradient) {
  std::vector<std::vector<int64_t>> sequences = {Tokens(9, 7), Tokens(4, 8),
                                                 Tokens(6, 9)};
  const int64_t total_loss_tokens = 8 + 3 + 5;
  auto tokens_of = [&](int i) { return sequences.at(i); };

  // Reference: all sequences in one pass, no recompute.
  std::shared_ptr<GptModel> reference = TinyModel();
  {
    absl::StatusOr<PackedShard> shard = ShardPackedSequences(sequences, 0, 1);
    ASSERT_TRUE(shard.ok());
    absl::StatusOr<torch::Tensor> logits =
        reference->Forward(*shard, SequenceParallelContext{}, 0);
    ASSERT_TRUE(logits.ok());
    (GptModel::TokenLossSum(*logits, shard->targets) / total_loss_tokens)
        .backward();
  }

  Plan plan;
  GroupPlan group;
  group.ranks = {0};
  MicroBatchPlan first;
  first.sequence_indices = {2, 0};
  first.checkpointed_layers = 1;
  MicroBatchPlan second;
  second.sequence_indices = {1};
  second.checkpointed_layers = 2;
  group.micro_batches = {first, second};
  plan.groups = {group};

  FakeCommunicator communicator;
  std::shared_ptr<GptModel> model = TinyModel();
  PlanExecutor executor(model, communicator);
  absl::StatusOr<StepResult> result =
      executor.RunStep(plan, tokens_of, total_loss_tokens);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->group_index, 0);
  EXPECT_EQ(result->sp_size, 1);
  ASSERT_EQ(result->micro_batches.size(), 2u);
  EXPECT_EQ(result->micro_batches[0].predicted_tokens, 5 + 8);
  EXPECT_EQ(result->micro_batches[0].all_to_all_calls, 0);
  EXPECT_EQ(result->micro_batches[0].communication_seconds, 0);
  EXPECT_NEAR(result->global_loss, result->local_loss, 1e-12);
  EXPECT_GT(result->global_loss, 0);
  EXPECT_EQ(communicator.world().all_to_all_calls, 0);
  // Gradients all-reduced once, the loss once.
  EXPECT_EQ(communicator.world().all_reduce_calls, 2);

  auto model_params = model->parameters();
  auto reference_params = reference->parameters();
  for (size_t i = 0; i < model_params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(model_params[i].grad(),
                                reference_params[i].grad(), /*rtol=*/0,
                                /*atol=*/1e-6))
        << "parameter " << i;
  }
}

/// A world of one rank whose AllReduceSum doubles its tensor, as a sum over
/// two ranks with identical contributions would; counts the calls.
class DoublingGroup final : public FakeCommGroup {
 public:
  DoublingGroup() : FakeCommGroup(/*global_rank=*/0) {}
  absl::Status AllReduceSum(torch::Tensor& tensor,
                            absl::Duration timeout) override {
    tensor.mul_(2);
    return FakeCommGroup::AllReduceSum(tensor, timeout);
  }
};

TEST(PlanExecutorTest, GradientBucketsDoNotChangeTheGradients) {
  std::vector<std::vector<int64_t>> sequences = {Tokens(9, 7), Tokens(4, 8)};
  auto tokens_of = [&](int i) { return sequences.at(i); };
  Plan plan;
  GroupPlan group;
  group.ranks = {0};
  MicroBatchPlan micro_batch;
  micro_batch.sequence_indices = {0, 1};
  group.micro_batches = {micro_batch};
  plan.groups = {group};

  // Reference: one rank, no communication.
  FakeCommunicator alone;
  std::shared_ptr<GptModel> reference = TinyModel();
  ASSERT_TRUE(PlanExecutor(reference, alone).RunStep(plan, tokens_of, 11).ok());
  const int num_parameters = static_cast<int>(reference->parameters().size());
  ASSERT_GT(num_parameters, 2);

  // One bucket per parameter, and all parameters in one bucket.
  for (const int64_t bucket_bytes : {int64_t{1}, int64_t{1} << 40}) {
    OneGroupCommunicator<DoublingGroup> doubling;
    std::shared_ptr<GptModel> model = TinyModel();
    PlanExecutorOptions options;
    options.all_reduce_bucket_bytes = bucket_bytes;
    ASSERT_TRUE(PlanExecutor(model, doubling, options)
                    .RunStep(plan, tokens_of, 11)
                    .ok());
    // The buckets, then the loss.
    EXPECT_EQ(doubling.group.all_reduce_calls,
              bucket_bytes == 1 ? num_parameters + 1 : 2);
    auto params = model->parameters();
    auto reference_params = reference->parameters();
    for (int i = 0; i < num_parameters; ++i) {
      EXPECT_TRUE(
          torch::equal(params[i].grad(), 2 * reference_params[i].grad()))
          << "parameter " << i << " with buckets of " << bucket_bytes
          << " bytes";
    }
  }
}

TEST(PlanExecutorTest, PhasesAccumulateIntoOneStepWithABarrierBetween) {
  std::vector<std::vector<int64_t>> sequences = {Tokens(9, 7), Tokens(4, 8),
                                                 Tokens(6, 9)};
  const int64_t total_loss_tokens = 8 + 3 + 5;
  auto tokens_of = [&](int i) { return sequences.at(i); };
  auto micro_batch = [](std::vector<int> indices, int checkpointed) {
    MicroBatchPlan plan;
    plan.sequence_indices = std::move(indices);
    plan.checkpointed_layers = checkpointed;
    return plan;
  };
  Plan one_layout;
  one_layout.groups = {GroupPlan{
      /*ranks=*/{0}, {micro_batch({0}, 1), micro_batch({1, 2}, 0)}}};
  PhasedPlan phased;
  Plan first;
  first.groups = {GroupPlan{/*ranks=*/{0}, {micro_batch({0}, 1)}}};
  Plan second;
  second.groups = {GroupPlan{/*ranks=*/{0}, {micro_batch({1, 2}, 0)}}};
  phased.phases = {first, second};

  FakeCommunicator alone;
  std::shared_ptr<GptModel> reference = TinyModel();
  ASSERT_TRUE(PlanExecutor(reference, alone)
                  .RunStep(one_layout, tokens_of, total_loss_tokens)
                  .ok());
  EXPECT_EQ(alone.world().barrier_calls, 0);

  const auto inputs_of = [&](int i) {
    SequenceInput input;
    input.token_ids = tokens_of(i);
    return input;
  };
  FakeCommunicator communicator;
  std::shared_ptr<GptModel> model = TinyModel();
  PlanExecutor executor(model, communicator);
  absl::StatusOr<StepResult> result =
      executor.RunStep(phased, inputs_of, total_loss_tokens);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(communicator.world().barrier_calls, 1);
  // Gradients all-reduced once (after both phases), the loss once.
  EXPECT_EQ(communicator.world().all_reduce_calls, 2);
  EXPECT_EQ(result->phase_group_indices, std::vector<int>({0, 0}));
  ASSERT_EQ(result->micro_batches.size(), 2u);
  EXPECT_EQ(result->micro_batches[0].phase, 0);
  EXPECT_EQ(result->micro_batches[1].phase, 1);
  auto params = model->parameters();
  auto reference_params = reference->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(params[i].grad(), reference_params[i].grad()))
        << "parameter " << i;
    EXPECT_TRUE(torch::equal(params[i], reference_params[i]))
        << "parameter " << i;
  }

  // Without barriers (Megatron's dev-branch rounds) the same gradients, and
  // no world barrier: a rank goes on to its next group at once.
  PhasedPlan rounds = phased;
  rounds.barriers = false;
  FakeCommunicator unbarriered;
  std::shared_ptr<GptModel> rounds_model = TinyModel();
  absl::StatusOr<StepResult> rounds_result =
      PlanExecutor(rounds_model, unbarriered)
          .RunStep(rounds, inputs_of, total_loss_tokens);
  ASSERT_TRUE(rounds_result.ok()) << rounds_result.status();
  EXPECT_EQ(unbarriered.world().barrier_calls, 0);
  auto rounds_params = rounds_model->parameters();
  for (size_t i = 0; i < rounds_params.size(); ++i) {
    EXPECT_TRUE(torch::equal(rounds_params[i], reference_params[i]))
        << "parameter " << i;
  }

  // A phase that leaves this rank out is refused before anything runs.
  PhasedPlan missing = phased;
  missing.phases[1].groups[0].ranks = {1};
  absl::StatusOr<StepResult> refused = executor.RunStep(
      missing, [](int) { return SequenceInput{}; }, total_loss_tokens);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("of phase 1"));
  EXPECT_EQ(executor
                .RunStep(PhasedPlan{}, [](int) { return SequenceInput{}; },
                         total_loss_tokens)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlanExecutorTest, RejectsPlansThisRankCannotRun) {
  FakeCommunicator communicator;
  PlanExecutor executor(TinyModel(), communicator);
  auto tokens_of = [](int i) { return Tokens(5, i); };
  Plan elsewhere;
  elsewhere.groups.push_back(GroupPlan{/*ranks=*/{1}, {}});
  EXPECT_EQ(executor.RunStep(elsewhere, tokens_of, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  Plan ok;
  ok.groups.push_back(GroupPlan{/*ranks=*/{0}, {}});
  EXPECT_EQ(executor.RunStep(ok, tokens_of, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  Plan empty_sequence = ok;
  MicroBatchPlan micro_batch;
  micro_batch.sequence_indices = {0};
  empty_sequence.groups[0].micro_batches = {micro_batch};
  EXPECT_EQ(
      executor
          .RunStep(
              empty_sequence, [](int) { return std::vector<int64_t>{}; }, 4)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(executor
                .RunStep(
                    empty_sequence,
                    [](int) {
                      return std::vector<int64_t>{1, 999};
                    },
                    1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
