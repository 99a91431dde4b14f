#include "planner/plan/plan_table.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dcp {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

}  // namespace

std::string DescribeRankList(const std::vector<int>& ranks) {
  if (ranks.empty()) return "-";
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i) {
    if (ranks[i] != ranks[0] + static_cast<int>(i)) contiguous = false;
  }
  if (ranks.size() == 1) return absl::StrCat(ranks[0]);
  if (contiguous) return absl::StrCat(ranks[0], "-", ranks.back());
  return absl::StrJoin(ranks, ",");
}

std::string PlanToTable(const Plan& plan,
                        absl::Span<const int64_t> lengths_tokens,
                        const CostModel& cost_model) {
  int64_t total_tokens = 0;
  for (int64_t length : lengths_tokens) total_tokens += length;
  std::string table = absl::StrFormat(
      "strategy %s: %d sequences, %d tokens on %d GPUs\n"
      "predicted step %.3f s (slowest group %.3f s + exposed all-reduce "
      "%.3f s); lower bound %.3f s (gap %.1f%%); peak memory %.1f%% of "
      "%.1f GiB\n",
      plan.strategy, lengths_tokens.size(), total_tokens,
      cost_model.cluster().NumGpus(), plan.predicted_step_seconds,
      plan.slowest_group_seconds, plan.exposed_allreduce_seconds,
      plan.lower_bound_seconds, 100 * plan.GapToLowerBound(),
      100 * MaxPeakBytes(plan) / cost_model.MemoryBudgetBytes(),
      cost_model.MemoryBudgetBytes() / kGiB);
  std::vector<std::vector<std::string>> rows = {
      {"group", "ranks", "SP", "seconds",
       "micro-batches: tokens(checkpointed layers)"}};
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const GroupPlan& group = plan.groups[g];
    std::vector<std::string> micro_batches;
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      int64_t tokens = 0;
      for (int index : micro_batch.sequence_indices) {
        if (index >= 0 && static_cast<size_t>(index) < lengths_tokens.size()) {
          tokens += lengths_tokens[index];
        }
      }
      micro_batches.push_back(
          absl::StrCat(tokens, "(", micro_batch.checkpointed_layers, ")"));
    }
    rows.push_back(
        {absl::StrCat(g), DescribeRankList(group.ranks),
         absl::StrCat(group.sp_size()),
         absl::StrFormat("%.3f", group.predicted_seconds),
         micro_batches.empty() ? "idle" : absl::StrJoin(micro_batches, " ")});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c + 1 < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) {
        line += std::string(widths[c] - row[c].size() + 2, ' ');
      }
    }
    absl::StrAppend(&table, line, "\n");
  }
  return table;
}

}  // namespace dcp
