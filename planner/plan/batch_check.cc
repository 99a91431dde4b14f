#include "planner/plan/batch_check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/byte_format.h"
#include "planner/plan/limits.h"

namespace dcp {

absl::Status ValidateBatch(absl::Span<const int64_t> lengths_tokens) {
  if (lengths_tokens.empty()) {
    return absl::InvalidArgumentError(
        "the global batch is empty; give it at least one sequence");
  }
  if (static_cast<int64_t>(lengths_tokens.size()) > kMaxBatchSequences) {
    return absl::InvalidArgumentError(
        absl::StrCat("the global batch has ", lengths_tokens.size(),
                     " sequences; at most ", kMaxBatchSequences,
                     " can be planned at once: use smaller global batches"));
  }
  for (size_t i = 0; i < lengths_tokens.size(); ++i) {
    if (lengths_tokens[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i, " has length ", lengths_tokens[i],
                       " tokens; every length must be at least 1"));
    }
    if (lengths_tokens[i] > kMaxSequenceTokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", i, " has length ", lengths_tokens[i],
          " tokens; at most ", kMaxSequenceTokens, " are supported"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> LegalSpSizes(const CostModel& cost_model,
                                              absl::Span<const int> requested) {
  const ClusterSpec& cluster = cost_model.cluster();
  const int heads = cost_model.model().num_attention_heads;
  const int world = cluster.NumGpus();
  const int per_node = cluster.gpus_per_node;
  auto why_illegal = [&](int sp) -> std::string {
    if (sp <= 0) return "it must be positive";
    // KV heads are replicated when `sp` does not divide their count
    // (ModelSpec::UlyssesKvCopies); query heads are only split.
    if (heads % sp != 0) {
      return absl::StrCat("Ulysses needs it to divide the model's ", heads,
                          " attention heads");
    }
    if (sp > world) return absl::StrCat("the world has only ", world, " GPUs");
    if (per_node % sp != 0 && sp % per_node != 0) {
      return absl::StrCat("it must divide the ", per_node,
                          " GPUs per node or be a multiple of it");
    }
    return "";
  };
  std::vector<int> sizes;
  if (requested.empty()) {
    for (int sp = 1; sp <= std::min(world, heads); ++sp) {
      if (why_illegal(sp).empty()) sizes.push_back(sp);
    }
  } else {
    for (int sp : requested) {
      std::string why = why_illegal(sp);
      if (!why.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("SP size ", sp, " is not allowed: ", why));
      }
      sizes.push_back(sp);
    }
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  }
  return sizes;
}

absl::StatusOr<std::vector<int>> SmallBatchSpSizes(
    const CostModel& cost_model, absl::Span<const int> requested,
    absl::Span<const int64_t> lengths_tokens, int max_sequences,
    absl::string_view solver) {
  if (absl::Status status = ValidateBatch(lengths_tokens); !status.ok()) {
    return status;
  }
  if (static_cast<int64_t>(lengths_tokens.size()) > max_sequences) {
    return absl::InvalidArgumentError(
        absl::StrCat(solver, " takes at most ", max_sequences,
                     " sequences; the batch has ", lengths_tokens.size()));
  }
  return LegalSpSizes(cost_model, requested);
}

absl::StatusOr<int> LargestPowerOfTwoCpSize(const CostModel& cost_model,
                                            absl::Span<const int> requested,
                                            absl::string_view strategy) {
  absl::StatusOr<std::vector<int>> legal = LegalSpSizes(cost_model, requested);
  if (!legal.ok()) return legal.status();
  if (legal->front() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        strategy,
        " needs SP size 1 among the SP sizes (its CP sizes are the powers of "
        "two from 1)"));
  }
  int largest = 1;
  while (std::find(legal->begin(), legal->end(), 2 * largest) !=
         legal->end()) {
    largest *= 2;
  }
  return largest;
}

absl::Status CheckModelStateFits(const CostModel& cost_model) {
  const double state_bytes = cost_model.memory().StaticBytes();
  const double budget_bytes = cost_model.MemoryBudgetBytes();
  if (state_bytes < budget_bytes) return absl::OkStatus();
  const MemoryParams& memory = cost_model.params().memory;
  const int world = cost_model.cluster().NumGpus();
  const double parameters =
      static_cast<double>(cost_model.model().ParameterCount());
  const bool zero3 = memory.zero3_parameter_sharding;
  // The static bytes less the part more GPUs shrink.
  const double sharded_bytes = cost_model.memory().ShardedStateBytes();
  const double replicated_bytes = state_bytes - sharded_bytes / world;
  const std::string what = absl::StrFormat(
      "the model state of %s alone needs %s per GPU (%.3g parameters x "
      "%g B weights + %g B gradients + %g B optimizer states%s%s) but the "
      "budget is %s (%.0f%% of %s)",
      cost_model.model().name, FormatBytes(state_bytes), parameters,
      memory.weight_bytes_per_parameter, memory.gradient_bytes_per_parameter,
      memory.optimizer_bytes_per_parameter,
      zero3 ? absl::StrCat(" all sharded over ", world,
                           " GPUs + two gathered units of ",
                           FormatBytes(cost_model.memory()
                                           .ShardingWorkingSetBytes()))
      : memory.zero1_optimizer_sharding
          ? absl::StrCat(" sharded over ", world, " GPUs")
          : std::string(),
      memory.communicator_bytes > 0
          ? absl::StrFormat(" + %d communicators of %.2f GB",
                            memory.communicators_per_rank,
                            memory.communicator_bytes / 1e9)
          : std::string(),
      FormatBytes(budget_bytes),
      100 * cost_model.cluster().usable_memory_fraction,
      FormatBytes(cost_model.cluster().gpu_memory_bytes));
  if (replicated_bytes >= budget_bytes) {
    std::vector<std::string> parts;
    if (zero3) {
      parts.push_back("gathered units");
    } else {
      parts = {"weights", "gradients"};
      if (!memory.zero1_optimizer_sharding) parts.push_back("optimizer states");
    }
    if (memory.communicator_bytes > 0 && memory.communicators_per_rank > 0) {
      parts.push_back("communicators");
    }
    if (memory.fixed_bytes > 0) parts.push_back("fixed runtime bytes");
    const std::string last = parts.back();
    parts.pop_back();
    return absl::ResourceExhaustedError(absl::StrCat(
        what, "; its ", absl::StrJoin(parts, ", "),
        parts.empty() ? "" : " and ", last, " alone need ",
        FormatBytes(replicated_bytes),
        " per GPU whatever the GPU count, so more GPUs cannot help: use ",
        zero3 ? "" : "ZeRO-3 (shard the weights and gradients too), ",
        "a GPU with more memory, a larger usable memory fraction, or a "
        "smaller model"));
  }
  // The fewest GPUs over which the shard fits beside the replicated part:
  // replicated + sharded / n < budget.
  const double min_gpus =
      std::floor(sharded_bytes / (budget_bytes - replicated_bytes)) + 1;
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s; use more GPUs (at least %.0f: %s over them), a larger usable "
      "memory fraction, or a smaller model",
      what, min_gpus,
      zero3 ? "ZeRO-3 shards the weights, gradients and optimizer states"
            : "ZeRO-1 shards the optimizer states"));
}

absl::StatusOr<int> MinFeasibleSpSize(const CostModel& cost_model,
                                      absl::Span<const int> sp_sizes,
                                      int sequence_index,
                                      int64_t length_tokens) {
  if (absl::Status status = CheckModelStateFits(cost_model); !status.ok()) {
    return status;
  }
  const int full = cost_model.model().num_layers;
  for (int sp : sp_sizes) {
    MicroBatchShape shape;
    shape.sp_size = sp;
    shape.AddSequence(length_tokens);
    if (cost_model.PeakBytes(shape, full) <= cost_model.MemoryBudgetBytes()) {
      return sp;
    }
  }
  const int largest = sp_sizes.empty() ? 1 : sp_sizes.back();
  MicroBatchShape shape;
  shape.sp_size = largest;
  shape.AddSequence(length_tokens);
  const std::string which =
      sequence_index >= 0 ? absl::StrCat("sequence ", sequence_index)
                          : std::string("the workload's longest sequence");
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s of %d tokens needs %s per GPU even at SP=%d with "
      "full recompute (%s of it model state); the budget is %s "
      "(%.0f%% of %s). Use more GPUs per SP group, a shorter maximum "
      "length, or a larger usable memory fraction",
      which, length_tokens, FormatBytes(cost_model.PeakBytes(shape, full)),
      largest, FormatBytes(cost_model.memory().StaticBytes()),
      FormatBytes(cost_model.MemoryBudgetBytes()),
      100 * cost_model.cluster().usable_memory_fraction,
      FormatBytes(cost_model.cluster().gpu_memory_bytes)));
}

}  // namespace dcp
