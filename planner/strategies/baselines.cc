#include "planner/strategies/baselines.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/plan/batch_check.h"
#include "planner/search/packing.h"

namespace dcp {
namespace {

// Data-parallel groups of the static SP size in consecutive aligned blocks.
std::vector<GroupPlan> StaticGroups(const CostModel& cost_model, int sp_size) {
  const int world = cost_model.cluster().NumGpus();
  std::vector<GroupPlan> groups(world / sp_size);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int r = 0; r < sp_size; ++r) {
      groups[g].ranks.push_back(static_cast<int>(g) * sp_size + r);
    }
  }
  return groups;
}

}  // namespace

absl::StatusOr<StaticConfig> ChooseStaticConfig(
    const CostModel& cost_model, const StaticOptions& options,
    absl::Span<const int64_t> lengths_tokens) {
  if (absl::Status status = ValidateBatch(lengths_tokens); !status.ok()) {
    return status;
  }
  if (options.micro_batch_sequences <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket micro-batch sequences = ",
                     options.micro_batch_sequences, " must be at least 1"));
  }
  // A static configuration must hold the longest sequence it will ever see;
  // a batch longer than the declared workload maximum raises it.
  const int64_t longest = std::max(
      options.workload_max_length_tokens,
      *std::max_element(lengths_tokens.begin(), lengths_tokens.end()));
  absl::StatusOr<std::vector<int>> sizes = LegalSpSizes(cost_model, {});
  if (!sizes.ok()) return sizes.status();
  absl::StatusOr<int> sp_size =
      MinFeasibleSpSize(cost_model, *sizes, /*sequence_index=*/-1, longest);
  if (!sp_size.ok()) return sp_size.status();
  if (options.sp_size != 0) {
    absl::StatusOr<std::vector<int>> legal =
        LegalSpSizes(cost_model, {options.sp_size});
    if (!legal.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("static SP: ", legal.status().message()));
    }
    if (options.sp_size < *sp_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "static SP ", options.sp_size, " cannot hold the longest sequence (",
          longest, " tokens) even with full recompute; it needs at least SP ",
          *sp_size));
    }
    sp_size = options.sp_size;
  }
  MicroBatchShape worst;
  worst.sp_size = *sp_size;
  for (int i = 0; i < options.micro_batch_sequences; ++i) {
    worst.AddSequence(longest);
  }
  std::optional<int> checkpointed = cost_model.MinCheckpointedLayers(worst);
  if (!checkpointed) {
    return absl::ResourceExhaustedError(absl::StrCat(
        options.micro_batch_sequences, " sequences of ", longest,
        " tokens per micro-batch do not fit at SP=", *sp_size,
        " even with full recompute; use 1 sequence per micro-batch"));
  }
  return StaticConfig{*sp_size, *checkpointed};
}

absl::StatusOr<Plan> PlanBucket(const CostModel& cost_model,
                                absl::Span<const int64_t> lengths_tokens,
                                const StaticOptions& options) {
  absl::StatusOr<StaticConfig> config =
      ChooseStaticConfig(cost_model, options, lengths_tokens);
  if (!config.ok()) return config.status();
  Plan plan;
  plan.strategy = "bucket";
  plan.groups = StaticGroups(cost_model, config->sp_size);
  const int num_groups = static_cast<int>(plan.groups.size());
  // Deal sequences out in sampler order.
  std::vector<std::vector<int>> dealt(num_groups);
  for (int i = 0; i < static_cast<int>(lengths_tokens.size()); ++i) {
    dealt[i % num_groups].push_back(i);
  }
  for (int g = 0; g < num_groups; ++g) {
    for (size_t start = 0; start < dealt[g].size();
         start += options.micro_batch_sequences) {
      MicroBatchPlan micro_batch;
      micro_batch.checkpointed_layers = config->checkpointed_layers;
      const size_t end = std::min(
          dealt[g].size(), start + options.micro_batch_sequences);
      micro_batch.sequence_indices.assign(dealt[g].begin() + start,
                                          dealt[g].begin() + end);
      plan.groups[g].micro_batches.push_back(std::move(micro_batch));
    }
  }
  PredictPlan(cost_model, lengths_tokens, plan);
  return plan;
}

absl::StatusOr<Plan> PlanPacked(const CostModel& cost_model,
                                absl::Span<const int64_t> lengths_tokens,
                                const StaticOptions& options) {
  absl::StatusOr<StaticConfig> config =
      ChooseStaticConfig(cost_model, options, lengths_tokens);
  if (!config.ok()) return config.status();
  const int sp_size = config->sp_size;
  const int64_t capacity =
      cost_model.MaxTokensPerRank(config->checkpointed_layers, sp_size);
  std::vector<int> all(lengths_tokens.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  std::vector<std::vector<int>> bins =
      PackFirstFitDecreasing(all, lengths_tokens, sp_size, capacity);

  Plan plan;
  plan.strategy = "packed";
  plan.groups = StaticGroups(cost_model, sp_size);
  // Largest micro-batch first onto the group with the fewest tokens.
  std::vector<std::pair<int64_t, int>> bin_tokens;
  for (size_t b = 0; b < bins.size(); ++b) {
    int64_t tokens = 0;
    for (int index : bins[b]) tokens += TokensPerRank(lengths_tokens[index], sp_size);
    bin_tokens.push_back({tokens, static_cast<int>(b)});
  }
  std::stable_sort(bin_tokens.begin(), bin_tokens.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  using Load = std::pair<int64_t, int>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> lightest;
  for (int g = 0; g < static_cast<int>(plan.groups.size()); ++g) {
    lightest.push({0, g});
  }
  for (const auto& [tokens, b] : bin_tokens) {
    auto [load, g] = lightest.top();
    lightest.pop();
    MicroBatchPlan micro_batch;
    micro_batch.sequence_indices = bins[b];
    micro_batch.checkpointed_layers = config->checkpointed_layers;
    plan.groups[g].micro_batches.push_back(std::move(micro_batch));
    lightest.push({load + tokens, g});
  }
  PredictPlan(cost_model, lengths_tokens, plan);
  return plan;
}

}  // namespace dcp
