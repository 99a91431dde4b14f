// Unit tests of the batch checks: batch validation, legal SP sizes, the
// least SP size a sequence fits, and whether the model state fits at all.
#include "planner/plan/batch_check.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/byte_format.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/memory_model.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/test_cost_model.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// `preset` on one H200-like GPU of `gpu_memory_bytes` whose workers talk
// over Gloo, so that the model state is the model's alone (no NCCL
// communicators).
CostModel OnOneGpuOf(const std::string& preset, double gpu_memory_bytes) {
  absl::StatusOr<ModelSpec> model = ModelPreset(preset);
  EXPECT_TRUE(model.ok()) << model.status();
  ClusterSpec cluster = H200Cluster(1, 1);
  cluster.gpu_memory_bytes = gpu_memory_bytes;
  CostParams params = DefaultCostParams(*model, cluster);
  SetCommunicatorMemory(CommunicatorBackend::kGloo, /*max_cached_groups=*/4,
                        params.memory);
  absl::StatusOr<CostModel> cost_model =
      CostModel::Create(*model, cluster, params);
  EXPECT_TRUE(cost_model.ok()) << cost_model.status();
  return *std::move(cost_model);
}

TEST(ValidateBatchTest, AcceptsPositiveLengths) {
  EXPECT_TRUE(ValidateBatch(std::vector<int64_t>{1}).ok());
  EXPECT_TRUE(ValidateBatch(std::vector<int64_t>{5, 1, 1'000'000}).ok());
}

TEST(ValidateBatchTest, RejectsAnEmptyBatch) {
  absl::Status status = ValidateBatch(std::vector<int64_t>{});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("empty"));
}

TEST(ValidateBatchTest, RejectsANonPositiveLengthNamingItsIndex) {
  absl::Status zero = ValidateBatch(std::vector<int64_t>{10, 20, 0, 30});
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.message(), HasSubstr("sequence 2 has length 0"));

  absl::Status negative = ValidateBatch(std::vector<int64_t>{-7, 0});
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.message(), HasSubstr("sequence 0 has length -7"));
}

TEST(ValidateBatchTest, RejectsAbsurdLengthsAndBatches) {
  // Lengths whose products overflowed int64 used to give "-2 tokens".
  absl::Status long_one =
      ValidateBatch(std::vector<int64_t>{10, (int64_t{1} << 40) + 1});
  EXPECT_EQ(long_one.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(long_one.message(), HasSubstr("sequence 1 has length"));
  EXPECT_TRUE(ValidateBatch(std::vector<int64_t>{int64_t{1} << 40}).ok());
  absl::Status too_many =
      ValidateBatch(std::vector<int64_t>((int64_t{1} << 20) + 1, 1));
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_many.message(), HasSubstr("at most 1048576"));
}

TEST(LegalSpSizesTest, AllLegalSizesPerModelAndCluster) {
  // llama3-8b: 32 attention heads over 8 KV heads; SP 16 and 32 replicate
  // the KV heads.
  EXPECT_THAT(*LegalSpSizes(MakeCostModel("llama3-8b", 4, 8), {}),
              ElementsAre(1, 2, 4, 8, 16, 32));
  // video-dit-1b: 16 heads, and 16 covers two whole nodes.
  EXPECT_THAT(*LegalSpSizes(MakeCostModel("video-dit-1b", 4, 8), {}),
              ElementsAre(1, 2, 4, 8, 16));
  // tiny: 4 attention heads over 2 KV heads.
  EXPECT_THAT(*LegalSpSizes(MakeCostModel("tiny", 4, 8), {}),
              ElementsAre(1, 2, 4));
  // The world caps them.
  EXPECT_THAT(*LegalSpSizes(MakeCostModel("llama3-8b", 1, 4), {}),
              ElementsAre(1, 2, 4));
  EXPECT_THAT(*LegalSpSizes(MakeCostModel("tiny", 1, 1), {}), ElementsAre(1));
  // 4 neither divides 6 GPUs per node nor is a multiple of it; 8 neither.
  EXPECT_THAT(*LegalSpSizes(MakeCostModel("video-dit-1b", 2, 6), {}),
              ElementsAre(1, 2));
}

TEST(LegalSpSizesTest, RequestedSizesAreSortedAndDeduplicated) {
  EXPECT_THAT(*LegalSpSizes(MakeCostModel("llama3-8b", 4, 8),
                            std::vector<int>{8, 2, 8}),
              ElementsAre(2, 8));
}

TEST(SmallBatchSpSizesTest, ChecksTheBatchItsSizeAndTheSpSizes) {
  const CostModel llama = MakeCostModel("llama3-8b", 1, 4);
  const std::vector<int64_t> three = {100, 200, 300};
  EXPECT_THAT(*SmallBatchSpSizes(llama, {}, three, 3, "the solver"),
              ElementsAre(1, 2, 4));
  absl::StatusOr<std::vector<int>> too_many =
      SmallBatchSpSizes(llama, {}, three, 2, "the solver");
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_many.status().message(),
              HasSubstr("the solver takes at most 2 sequences; the batch "
                        "has 3"));
  EXPECT_EQ(SmallBatchSpSizes(llama, {}, std::vector<int64_t>{100, 0}, 3,
                              "the solver")
                .status(),
            ValidateBatch(std::vector<int64_t>{100, 0}));
  EXPECT_EQ(SmallBatchSpSizes(llama, std::vector<int>{3}, three, 3,
                              "the solver")
                .status(),
            LegalSpSizes(llama, std::vector<int>{3}).status());
}

TEST(LargestPowerOfTwoCpSizeTest, StopsAtTheFirstMissingPowerOfTwo) {
  const CostModel llama = MakeCostModel("llama3-8b", 4, 8);
  EXPECT_EQ(*LargestPowerOfTwoCpSize(llama, {}, "peer"), 32);
  EXPECT_EQ(*LargestPowerOfTwoCpSize(llama, std::vector<int>{1, 2, 8}, "peer"),
            2);
  absl::StatusOr<int> no_one =
      LargestPowerOfTwoCpSize(llama, std::vector<int>{2, 4}, "peer");
  EXPECT_EQ(no_one.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_one.status().message(), HasSubstr("peer needs SP size 1"));
}

TEST(LegalSpSizesTest, IllegalRequestedSizesSayWhy) {
  const CostModel llama = MakeCostModel("llama3-8b", 4, 8);
  {
    absl::StatusOr<std::vector<int>> sizes =
        LegalSpSizes(llama, std::vector<int>{1, 3});
    EXPECT_EQ(sizes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(sizes.status().message(), HasSubstr("SP size 3"));
    EXPECT_THAT(sizes.status().message(), HasSubstr("32 attention heads"));
  }
  {
    // 64 does not divide the 32 attention heads (nor fit the 32 GPUs).
    absl::StatusOr<std::vector<int>> sizes =
        LegalSpSizes(llama, std::vector<int>{64});
    EXPECT_EQ(sizes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(sizes.status().message(), HasSubstr("SP size 64"));
    EXPECT_THAT(sizes.status().message(), HasSubstr("32 attention heads"));
  }
  {
    absl::StatusOr<std::vector<int>> sizes =
        LegalSpSizes(llama, std::vector<int>{0});
    EXPECT_EQ(sizes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(sizes.status().message(), HasSubstr("positive"));
  }
  {
    absl::StatusOr<std::vector<int>> sizes =
        LegalSpSizes(MakeCostModel("llama3-8b", 1, 4), std::vector<int>{8});
    EXPECT_EQ(sizes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(sizes.status().message(), HasSubstr("only 4 GPUs"));
  }
  {
    absl::StatusOr<std::vector<int>> sizes =
        LegalSpSizes(MakeCostModel("video-dit-1b", 2, 6), std::vector<int>{4});
    EXPECT_EQ(sizes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(sizes.status().message(), HasSubstr("6 GPUs per node"));
  }
}

TEST(MinFeasibleSpSizeTest, LeastSizeThatHoldsTheSequenceWithFullRecompute) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  const std::vector<int> sizes = {1, 2, 4, 8};
  const int layers = cost_model.model().num_layers;
  // The most tokens one rank holds with every layer recomputed.
  const int64_t per_rank = cost_model.MaxTokensPerRank(layers, /*sp_size=*/8);
  ASSERT_GT(per_rank, 0);
  struct Case {
    int64_t length;
    int expected_sp;
  };
  for (const Case& c :
       {Case{1, 1}, Case{per_rank, 1}, Case{per_rank + 1, 2},
        Case{2 * per_rank, 2}, Case{2 * per_rank + 1, 4}, Case{4 * per_rank, 4},
        Case{4 * per_rank + 1, 8}, Case{8 * per_rank, 8}}) {
    SCOPED_TRACE(testing::Message() << c.length << " tokens");
    absl::StatusOr<int> sp =
        MinFeasibleSpSize(cost_model, sizes, /*sequence_index=*/0, c.length);
    ASSERT_TRUE(sp.ok()) << sp.status();
    EXPECT_EQ(*sp, c.expected_sp);
    // Independently of MaxTokensPerRank: it fits there and not below.
    MicroBatchShape at_sp = ShapeOf({c.length}, *sp);
    EXPECT_LE(cost_model.PeakBytes(at_sp, layers),
              cost_model.MemoryBudgetBytes());
    for (int smaller : sizes) {
      if (smaller >= *sp) break;
      EXPECT_GT(cost_model.PeakBytes(ShapeOf({c.length}, smaller), layers),
                cost_model.MemoryBudgetBytes());
    }
  }
  // Past SP 8 the sequence needs SP 16, whose KV copies leave fewer tokens
  // per rank than SP 8's.
  const int64_t per_rank_16 =
      cost_model.MaxTokensPerRank(layers, /*sp_size=*/16);
  ASSERT_LT(per_rank_16, per_rank);
  ASSERT_GT(per_rank_16 * 16, per_rank * 8);
  EXPECT_EQ(*MinFeasibleSpSize(cost_model, std::vector<int>{1, 2, 4, 8, 16},
                               /*sequence_index=*/0, 8 * per_rank + 1),
            16);
  EXPECT_EQ(*MinFeasibleSpSize(cost_model, std::vector<int>{1, 2, 4, 8, 16},
                               /*sequence_index=*/0, 16 * per_rank_16),
            16);
  EXPECT_EQ(MinFeasibleSpSize(cost_model, std::vector<int>{1, 2, 4, 8, 16},
                              /*sequence_index=*/0, 16 * per_rank_16 + 16)
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
  // Only the offered sizes count.
  EXPECT_EQ(*MinFeasibleSpSize(cost_model, std::vector<int>{4, 8},
                               /*sequence_index=*/0, /*length_tokens=*/10),
            4);
}

TEST(MinFeasibleSpSizeTest, NothingFitsNamesSequenceTokensBytesAndBudget) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  const int64_t length = 8 * cost_model.MaxTokensPerRank(32, /*sp_size=*/8) + 8;
  absl::StatusOr<int> sp =
      MinFeasibleSpSize(cost_model, std::vector<int>{1, 2, 4, 8},
                        /*sequence_index=*/17, length);
  EXPECT_EQ(sp.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(sp.status().message());
  EXPECT_THAT(message, HasSubstr("sequence 17"));
  EXPECT_THAT(message, HasSubstr(absl::StrFormat("%d tokens", length)));
  EXPECT_THAT(message, HasSubstr("SP=8"));
  EXPECT_THAT(
      message,
      HasSubstr(FormatBytes(cost_model.PeakBytes(ShapeOf({length}, 8), 32))));
  EXPECT_THAT(message,
              HasSubstr(absl::StrCat(
                  "budget is ", FormatBytes(cost_model.MemoryBudgetBytes()))));
}

TEST(MinFeasibleSpSizeTest, NegativeIndexMeansTheWorkloadsLongest) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  absl::StatusOr<int> sp =
      MinFeasibleSpSize(cost_model, std::vector<int>{1, 2, 4, 8},
                        /*sequence_index=*/-1, /*length_tokens=*/10'000'000);
  EXPECT_EQ(sp.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(sp.status().message(),
              HasSubstr("the workload's longest sequence"));
  EXPECT_THAT(sp.status().message(), HasSubstr("10000000 tokens"));
}

TEST(MinFeasibleSpSizeTest, ModelStateThatDoesNotFitComesFirst) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 1);
  absl::StatusOr<int> sp =
      MinFeasibleSpSize(cost_model, std::vector<int>{1},
                        /*sequence_index=*/0, /*length_tokens=*/1);
  EXPECT_EQ(sp.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(sp.status().message(), HasSubstr("model state"));
}

TEST(CheckModelStateFitsTest, FitsWhereTheStateIsSmall) {
  EXPECT_TRUE(CheckModelStateFits(MakeCostModel("llama3-8b", 4, 8)).ok());
  EXPECT_TRUE(CheckModelStateFits(MakeCostModel("tiny", 1, 1)).ok());
  EXPECT_TRUE(CheckModelStateFits(MakeCostModel("video-dit-1b", 1, 1)).ok());
}

TEST(CheckModelStateFitsTest, Llama8bOnOneGpuNamesModelAndBudget) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 1);
  absl::Status status = CheckModelStateFits(cost_model);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("llama3-8b"));
  EXPECT_THAT(status.message(),
              HasSubstr(FormatBytes(cost_model.memory().StaticBytes())));
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat(
                  "budget is ", FormatBytes(cost_model.MemoryBudgetBytes()))));
}

TEST(CheckModelStateFitsTest, Llama70bOnFourNodesNamesModelAndBudget) {
  const CostModel cost_model = MakeCostModel("llama3-70b", 4, 8);
  absl::Status status = CheckModelStateFits(cost_model);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("llama3-70b"));
  EXPECT_THAT(status.message(), HasSubstr("sharded over 32 GPUs"));
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat(
                  "budget is ", FormatBytes(cost_model.MemoryBudgetBytes()))));
}

TEST(CheckModelStateFitsTest, TinyBudgetPrintsInTheUnitOfItsSize) {
  // tiny's state is under 2 MiB; a 1 MiB budget used to read "0.0 GiB".
  const CostModel cost_model = OnOneGpuOf("tiny", 1.25 * 1024 * 1024);
  absl::Status status = CheckModelStateFits(cost_model);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("MiB"));
  EXPECT_THAT(status.message(), Not(HasSubstr("0.0 GiB")));
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat(
                  "budget is ", FormatBytes(cost_model.MemoryBudgetBytes()),
                  " (80% of ")));
}

TEST(MinFeasibleSpSizeTest, TinyBudgetPrintsInTheUnitOfItsSize) {
  // 64 MiB hold tiny's state but not a million tokens.
  const CostModel cost_model = OnOneGpuOf("tiny", 80.0 * 1024 * 1024);
  ASSERT_TRUE(CheckModelStateFits(cost_model).ok());
  absl::StatusOr<int> sp =
      MinFeasibleSpSize(cost_model, std::vector<int>{1},
                        /*sequence_index=*/3, /*length_tokens=*/1'000'000);
  EXPECT_EQ(sp.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(sp.status().message(), HasSubstr("MiB of it model state"));
  EXPECT_THAT(sp.status().message(), HasSubstr("budget is 64.0 MiB"));
  EXPECT_THAT(sp.status().message(), Not(HasSubstr("0.0 GiB")));
}

// The bytes of the model state that no GPU count shrinks: weights,
// gradients and communicators (ZeRO-1 shards the optimizer states).
double ReplicatedBytes(const CostModel& cost_model) {
  const MemoryParams& memory = cost_model.params().memory;
  return static_cast<double>(cost_model.model().ParameterCount()) *
             (memory.weight_bytes_per_parameter +
              memory.gradient_bytes_per_parameter) +
         memory.communicator_bytes * memory.communicators_per_rank +
         memory.fixed_bytes;
}

TEST(CheckModelStateFitsTest, MoreGpusHelpWhenTheOptimizerShardDoesNotFit) {
  // llama3-8b: 48 GB of weights and gradients and 3 GB of communicators fit
  // the 112.8 GB budget; the 96 GB of optimizer states do not, but half
  // of them do.
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 1);
  ASSERT_LT(ReplicatedBytes(cost_model), cost_model.MemoryBudgetBytes());
  absl::Status status = CheckModelStateFits(cost_model);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("use more GPUs (at least 2:"));
  EXPECT_THAT(status.message(), Not(HasSubstr("cannot help")));
  EXPECT_TRUE(CheckModelStateFits(MakeCostModel("llama3-8b", 1, 2)).ok());
}

TEST(CheckModelStateFitsTest, MoreGpusCannotHelpWhenWeightsAndGradientsDoNot) {
  // llama3-70b: 423 GB of weights and gradients per GPU on any cluster.
  for (int nodes : {1, 4}) {
    SCOPED_TRACE(testing::Message() << nodes << " nodes");
    const CostModel cost_model = MakeCostModel("llama3-70b", nodes, 8);
    ASSERT_GE(ReplicatedBytes(cost_model), cost_model.MemoryBudgetBytes());
    absl::Status status = CheckModelStateFits(cost_model);
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat(
                    "its weights, gradients and communicators alone need ",
                    FormatBytes(ReplicatedBytes(cost_model)),
                    " per GPU whatever the GPU count, so more GPUs cannot "
                    "help: use ZeRO-3 (shard the weights and gradients "
                    "too), a GPU with more memory")));
    EXPECT_THAT(status.message(), Not(HasSubstr("use more GPUs")));
  }
}

TEST(CheckModelStateFitsTest, WithZero3MoreGpusHelpLlama70b) {
  // ZeRO-3 shards llama3-70b's 1.27 TB of state: over 8 GPUs 159 GB do not
  // fit; over 14 or more they do (besides two gathered units).
  const CostModel one_node = MakeZero3CostModel("llama3-70b", 1, 8);
  absl::Status status = CheckModelStateFits(one_node);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(),
              HasSubstr("use more GPUs (at least 14: ZeRO-3 shards the "
                        "weights, gradients and optimizer states"));
  EXPECT_THAT(status.message(), HasSubstr("all sharded over 8 GPUs"));
  EXPECT_TRUE(CheckModelStateFits(MakeZero3CostModel("llama3-70b", 2, 8)).ok());
  EXPECT_TRUE(CheckModelStateFits(MakeZero3CostModel("llama3-70b", 4, 8)).ok());
}

TEST(CheckModelStateFitsTest, WithoutZero1MoreGpusCannotHelp) {
  // Without ZeRO-1 every GPU holds all 144 GB of llama3-8b's state.
  absl::StatusOr<ModelSpec> model = ModelPreset("llama3-8b");
  ASSERT_TRUE(model.ok()) << model.status();
  const ClusterSpec cluster = H200Cluster(4, 8);
  CostParams params = DefaultCostParams(*model, cluster);
  params.memory.zero1_optimizer_sharding = false;
  absl::StatusOr<CostModel> cost_model =
      CostModel::Create(*model, cluster, params);
  ASSERT_TRUE(cost_model.ok()) << cost_model.status();
  absl::Status status = CheckModelStateFits(*cost_model);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat(
                  "its weights, gradients, optimizer states and communicators "
                  "alone need ",
                  FormatBytes(cost_model->memory().StaticBytes()),
                  " per GPU whatever the GPU count")));
  EXPECT_THAT(status.message(), Not(HasSubstr("use more GPUs")));
}

}  // namespace
}  // namespace dcp
