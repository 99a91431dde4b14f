#include "planner/plan/validate.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cost_model/micro_batch_shape.h"

namespace dcp {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
// Problems listed in one error; the rest are counted.
constexpr int kMaxProblemsListed = 10;
// Indices listed in one "missing" problem.
constexpr int kMaxIndicesListed = 10;

// Collects problems; not thread-safe.
class Problems {
 public:
  void Add(std::string problem) {
    ++count_;
    if (static_cast<int>(listed_.size()) < kMaxProblemsListed) {
      listed_.push_back(std::move(problem));
    }
  }
  bool empty() const { return count_ == 0; }

  absl::Status ToStatus() const {
    if (count_ == 0) return absl::OkStatus();
    if (count_ == 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid plan: ", listed_[0]));
    }
    std::string message = absl::StrCat(
        "invalid plan: ", count_, " problems: ", absl::StrJoin(listed_, "; "));
    if (count_ > static_cast<int>(listed_.size())) {
      absl::StrAppend(&message, "; and ", count_ - listed_.size(), " more");
    }
    return absl::InvalidArgumentError(message);
  }

 private:
  int count_ = 0;
  std::vector<std::string> listed_;
};

// "ranks 8-15" for a contiguous ascending list, else the list.
std::string DescribeRanks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no ranks";
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i) {
    if (ranks[i] != ranks[0] + static_cast<int>(i)) contiguous = false;
  }
  if (ranks.size() == 1) return absl::StrCat("rank ", ranks[0]);
  if (contiguous) return absl::StrCat("ranks ", ranks[0], "-", ranks.back());
  return absl::StrCat("ranks [", absl::StrJoin(ranks, ","), "]");
}

std::string GroupName(int g, const GroupPlan& group) {
  return absl::StrCat("group ", g, " (", DescribeRanks(group.ranks),
                      ", SP=", group.ranks.size(), ")");
}

std::string ListIndices(const std::vector<int>& indices) {
  std::vector<int> shown(
      indices.begin(),
      indices.begin() + std::min<size_t>(indices.size(), kMaxIndicesListed));
  std::string text = absl::StrJoin(shown, ", ");
  if (indices.size() > shown.size()) {
    absl::StrAppend(&text, " and ", indices.size() - shown.size(), " more");
  }
  return text;
}

// Rank layout of one group of a legal size.
void CheckGroupLayout(int g, const GroupPlan& group, const ClusterSpec& cluster,
                      Problems& problems) {
  const int size = static_cast<int>(group.ranks.size());
  const int per_node = cluster.gpus_per_node;
  if (size <= per_node) {
    if (per_node % size != 0) {
      problems.Add(
          absl::StrCat(GroupName(g, group), ": a group of ", size,
                       " ranks must have a size that divides the ", per_node,
                       " GPUs per node, so that aligned groups tile the node"));
      return;
    }
    bool contiguous = true;
    for (int i = 1; i < size; ++i) {
      if (group.ranks[i] != group.ranks[0] + i) contiguous = false;
    }
    if (!contiguous || group.ranks[0] % size != 0) {
      problems.Add(absl::StrCat(
          GroupName(g, group), ": a group of ", size,
          " ranks must be a contiguous ascending block starting at a multiple "
          "of ",
          size, " (inside one node of ", per_node, " GPUs)"));
    }
    return;
  }
  if (size % per_node != 0) {
    problems.Add(absl::StrCat(GroupName(g, group), ": a group of ", size,
                              " ranks spans nodes, so its size must be a "
                              "multiple of the ",
                              per_node, " GPUs per node"));
    return;
  }
  // Whole nodes: every node it touches it holds entirely (ranks are distinct
  // and in range here, so a count of per_node means the full node).
  std::vector<int> ranks_on_node(cluster.num_nodes, 0);
  for (int rank : group.ranks) ++ranks_on_node[rank / per_node];
  std::vector<int> partial_nodes;
  for (int node = 0; node < cluster.num_nodes; ++node) {
    if (ranks_on_node[node] != 0 && ranks_on_node[node] != per_node) {
      partial_nodes.push_back(node);
    }
  }
  if (!partial_nodes.empty()) {
    problems.Add(absl::StrCat(GroupName(g, group),
                              ": a group larger than a node must cover whole "
                              "nodes, but it holds only part of node(s) ",
                              ListIndices(partial_nodes), " (", per_node,
                              " GPUs each)"));
  }
}

// ValidatePlan, with the memory check only when `cost_model` is given.
absl::Status Validate(const ModelSpec& model, const ClusterSpec& cluster,
                      const CostModel* cost_model,
                      absl::Span<const int64_t> lengths_tokens,
                      const Plan& plan) {
  Problems problems;
  const int world = cluster.NumGpus();
  const int heads = model.num_attention_heads;
  const int num_layers = model.num_layers;
  const int num_sequences = static_cast<int>(lengths_tokens.size());

  if (lengths_tokens.empty()) {
    problems.Add("the batch has no sequences; give the lengths it plans");
  }
  bool lengths_ok = true;
  for (int i = 0; i < num_sequences; ++i) {
    if (lengths_tokens[i] <= 0) {
      lengths_ok = false;
      problems.Add(absl::StrCat("sequence ", i, " has length ",
                                lengths_tokens[i],
                                " tokens; every length must be at least 1"));
    }
  }
  if (plan.groups.empty()) {
    problems.Add(absl::StrCat("the plan has no groups; it must place all ",
                              world, " ranks in SP groups"));
  }

  // Ranks and group shapes.
  std::vector<int> group_of_rank(world, -1);
  for (int g = 0; g < static_cast<int>(plan.groups.size()); ++g) {
    const GroupPlan& group = plan.groups[g];
    const int size = static_cast<int>(group.ranks.size());
    if (size == 0) {
      problems.Add(absl::StrCat(
          "group ", g, " has no ranks; every group needs at least one"));
      continue;
    }
    bool ranks_ok = true;
    for (int rank : group.ranks) {
      if (rank < 0 || rank >= world) {
        ranks_ok = false;
        problems.Add(absl::StrCat(GroupName(g, group), ": rank ", rank,
                                  " is outside [0, ", world, ") (",
                                  cluster.num_nodes, " nodes x ",
                                  cluster.gpus_per_node, " GPUs)"));
        continue;
      }
      if (group_of_rank[rank] == g) {
        ranks_ok = false;
        problems.Add(absl::StrCat(GroupName(g, group), ": rank ", rank,
                                  " appears twice in the group"));
      } else if (group_of_rank[rank] >= 0) {
        ranks_ok = false;
        problems.Add(absl::StrCat(GroupName(g, group), ": rank ", rank,
                                  " is already in group ", group_of_rank[rank],
                                  "; a rank belongs to exactly one group"));
      } else {
        group_of_rank[rank] = g;
      }
    }
    // KV heads are replicated where `size` does not divide their count.
    if (heads <= 0 || heads % size != 0) {
      problems.Add(absl::StrCat(GroupName(g, group), ": SP size ", size,
                                " must divide the model's ", heads,
                                " attention heads (Ulysses splits heads over "
                                "ranks)"));
    } else if (ranks_ok) {
      CheckGroupLayout(g, group, cluster, problems);
    }
  }
  std::vector<int> unassigned_ranks;
  for (int rank = 0; rank < world; ++rank) {
    if (group_of_rank[rank] < 0) unassigned_ranks.push_back(rank);
  }
  if (!unassigned_ranks.empty() && !plan.groups.empty()) {
    problems.Add(absl::StrCat(
        unassigned_ranks.size(), " of ", world, " ranks are in no group: ",
        ListIndices(unassigned_ranks), "; every rank must be in one SP group"));
  }

  // Micro-batches and sequences.
  // Where each sequence was first planned, for duplicate messages.
  std::vector<std::string> planned_at(num_sequences);
  for (int g = 0; g < static_cast<int>(plan.groups.size()); ++g) {
    const GroupPlan& group = plan.groups[g];
    const int size = static_cast<int>(group.ranks.size());
    for (int m = 0; m < static_cast<int>(group.micro_batches.size()); ++m) {
      const MicroBatchPlan& micro_batch = group.micro_batches[m];
      const std::string where =
          absl::StrCat(GroupName(g, group), " micro-batch ", m);
      if (micro_batch.sequence_indices.empty()) {
        problems.Add(
            absl::StrCat(where, " is empty; drop it or give it sequences"));
      }
      bool layers_ok = true;
      if (micro_batch.checkpointed_layers < 0 ||
          micro_batch.checkpointed_layers > num_layers) {
        layers_ok = false;
        problems.Add(absl::StrCat(
            where, ": checkpointed_layers = ", micro_batch.checkpointed_layers,
            " is outside [0, ", num_layers, "] (the model has ", num_layers,
            " layers)"));
      }
      bool indices_ok = true;
      for (int index : micro_batch.sequence_indices) {
        if (index < 0 || index >= num_sequences) {
          indices_ok = false;
          problems.Add(absl::StrCat(where, ": sequence index ", index,
                                    " is outside [0, ", num_sequences,
                                    ") (the batch has ", num_sequences,
                                    " sequences)"));
          continue;
        }
        if (!planned_at[index].empty()) {
          problems.Add(absl::StrCat(
              "sequence ", index, " is planned twice: in ", planned_at[index],
              " and in ", where, "; each sequence runs exactly once"));
        } else {
          planned_at[index] = where;
        }
      }
      if (cost_model == nullptr || !indices_ok || !layers_ok || !lengths_ok ||
          size == 0 || micro_batch.sequence_indices.empty()) {
        continue;
      }
      const double budget_bytes = cost_model->MemoryBudgetBytes();
      MicroBatchShape shape;
      shape.sp_size = size;
      for (int index : micro_batch.sequence_indices) {
        shape.AddSequence(lengths_tokens[index]);
      }
      const double peak_bytes =
          cost_model->PeakBytes(shape, micro_batch.checkpointed_layers);
      // A relative slack of 1e-9 absorbs rounding, not real overflows.
      if (!(peak_bytes <= budget_bytes * (1 + 1e-9))) {
        problems.Add(absl::StrFormat(
            "%s: peak memory %.2f GiB exceeds the budget of %.2f GiB per GPU "
            "(%d sequences, %d tokens, %d tokens per rank, %d of %d layers "
            "checkpointed); checkpoint more layers, split the micro-batch or "
            "run it on a larger group",
            where, peak_bytes / kGiB, budget_bytes / kGiB, shape.num_sequences,
            shape.sum_lengths, shape.tokens_per_rank,
            micro_batch.checkpointed_layers, num_layers));
      }
    }
  }
  std::vector<int> missing;
  for (int i = 0; i < num_sequences; ++i) {
    if (planned_at[i].empty()) missing.push_back(i);
  }
  if (!missing.empty()) {
    problems.Add(
        absl::StrCat(missing.size(), " of ", num_sequences,
                     " sequences are in no micro-batch: ", ListIndices(missing),
                     "; every sequence must be planned once"));
  }
  return problems.ToStatus();
}

}  // namespace

absl::Status ValidatePlan(const CostModel& cost_model,
                          absl::Span<const int64_t> lengths_tokens,
                          const Plan& plan) {
  return Validate(cost_model.model(), cost_model.cluster(), &cost_model,
                  lengths_tokens, plan);
}

absl::Status ValidatePlanStructure(const ModelSpec& model,
                                   const ClusterSpec& cluster,
                                   absl::Span<const int64_t> lengths_tokens,
                                   const Plan& plan) {
  return Validate(model, cluster, /*cost_model=*/nullptr, lengths_tokens, plan);
}

}  // namespace dcp
