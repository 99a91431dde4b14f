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

// The batch: at least one sequence, every length positive. Returns whether
// every length is positive.
bool CheckLengths(absl::Span<const int64_t> lengths_tokens,
                  Problems& problems) {
  if (lengths_tokens.empty()) {
    problems.Add("the batch has no sequences; give the lengths it plans");
  }
  bool lengths_ok = true;
  for (int i = 0; i < static_cast<int>(lengths_tokens.size()); ++i) {
    if (lengths_tokens[i] <= 0) {
      lengths_ok = false;
      problems.Add(absl::StrCat("sequence ", i, " has length ",
                                lengths_tokens[i],
                                " tokens; every length must be at least 1"));
    }
  }
  return lengths_ok;
}

// Records group `g`'s ranks in `group_of_rank`. Returns whether every rank
// is in range and in no other group, and none is repeated.
bool AssignGroupRanks(int g, const GroupPlan& group, const ClusterSpec& cluster,
                      std::vector<int>& group_of_rank, Problems& problems) {
  const int world = cluster.NumGpus();
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
  return ranks_ok;
}

// The groups: each has ranks, in range and in no other group, a size that
// divides the attention heads and a legal layout; and every rank is in
// some group.
void CheckGroups(const ModelSpec& model, const ClusterSpec& cluster,
                 const Plan& plan, Problems& problems) {
  const int world = cluster.NumGpus();
  const int heads = model.num_attention_heads;
  if (plan.groups.empty()) {
    problems.Add(absl::StrCat("the plan has no groups; it must place all ",
                              world, " ranks in SP groups"));
  }
  std::vector<int> group_of_rank(world, -1);
  for (int g = 0; g < static_cast<int>(plan.groups.size()); ++g) {
    const GroupPlan& group = plan.groups[g];
    const int size = static_cast<int>(group.ranks.size());
    if (size == 0) {
      problems.Add(absl::StrCat(
          "group ", g, " has no ranks; every group needs at least one"));
      continue;
    }
    const bool ranks_ok =
        AssignGroupRanks(g, group, cluster, group_of_rank, problems);
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
}

// One micro-batch's checkpointed layers are in [0, num_layers]. Returns
// whether they are.
bool CheckCheckpointedLayers(const std::string& where,
                             const MicroBatchPlan& micro_batch, int num_layers,
                             Problems& problems) {
  if (micro_batch.checkpointed_layers >= 0 &&
      micro_batch.checkpointed_layers <= num_layers) {
    return true;
  }
  problems.Add(absl::StrCat(
      where, ": checkpointed_layers = ", micro_batch.checkpointed_layers,
      " is outside [0, ", num_layers, "] (the model has ", num_layers,
      " layers)"));
  return false;
}

// One micro-batch's sequence indices: each in range and not planned
// before; `planned_at` records where each was first planned. Returns
// whether every index is in range.
bool CheckSequenceIndices(const std::string& where,
                          const MicroBatchPlan& micro_batch,
                          std::vector<std::string>& planned_at,
                          Problems& problems) {
  const int num_sequences = static_cast<int>(planned_at.size());
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
  return indices_ok;
}

// One micro-batch's peak memory on a group of `sp_size` ranks, recomputed
// from the cost model, fits the budget.
void CheckMicroBatchMemory(const CostModel& cost_model,
                           absl::Span<const int64_t> lengths_tokens,
                           int sp_size, const std::string& where,
                           const MicroBatchPlan& micro_batch,
                           Problems& problems) {
  const double budget_bytes = cost_model.MemoryBudgetBytes();
  const MicroBatchShape shape =
      ShapeOfSequences(lengths_tokens, micro_batch.sequence_indices, sp_size);
  const double peak_bytes =
      cost_model.PeakBytes(shape, micro_batch.checkpointed_layers);
  // A relative slack of 1e-9 absorbs rounding, not real overflows.
  if (!(peak_bytes <= budget_bytes * (1 + 1e-9))) {
    problems.Add(absl::StrFormat(
        "%s: peak memory %.2f GiB exceeds the budget of %.2f GiB per GPU "
        "(%d sequences, %d tokens, %d tokens per rank, %d of %d layers "
        "checkpointed); checkpoint more layers, split the micro-batch or "
        "run it on a larger group",
        where, peak_bytes / kGiB, budget_bytes / kGiB, shape.num_sequences,
        shape.sum_lengths, shape.tokens_per_rank,
        micro_batch.checkpointed_layers, cost_model.model().num_layers));
  }
}

// The micro-batches: each non-empty, its checkpointed layers and sequence
// indices in range, no sequence planned twice and, where `memory_model` is
// given, its peak memory within the budget. Returns where each sequence
// was first planned (empty where nowhere).
std::vector<std::string> CheckMicroBatches(
    const ModelSpec& model, const CostModel* memory_model,
    absl::Span<const int64_t> lengths_tokens, const Plan& plan,
    Problems& problems) {
  std::vector<std::string> planned_at(lengths_tokens.size());
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
      const bool layers_ok = CheckCheckpointedLayers(
          where, micro_batch, model.num_layers, problems);
      const bool indices_ok =
          CheckSequenceIndices(where, micro_batch, planned_at, problems);
      if (memory_model == nullptr || !indices_ok || !layers_ok || size == 0 ||
          micro_batch.sequence_indices.empty()) {
        continue;
      }
      CheckMicroBatchMemory(*memory_model, lengths_tokens, size, where,
                            micro_batch, problems);
    }
  }
  return planned_at;
}

// Every sequence is in some micro-batch (`planned_at` non-empty).
void CheckEverySequencePlanned(const std::vector<std::string>& planned_at,
                               Problems& problems) {
  const int num_sequences = static_cast<int>(planned_at.size());
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
}

// ValidatePlan, with the memory check only when `cost_model` is given.
// Problems are listed in the order of the checks: the batch, the groups and
// their ranks, the micro-batches, then the sequences no micro-batch plans.
absl::Status Validate(const ModelSpec& model, const ClusterSpec& cluster,
                      const CostModel* cost_model,
                      absl::Span<const int64_t> lengths_tokens,
                      const Plan& plan) {
  Problems problems;
  const bool lengths_ok = CheckLengths(lengths_tokens, problems);
  CheckGroups(model, cluster, plan, problems);
  // Memory is priced only from valid lengths.
  const CostModel* memory_model = lengths_ok ? cost_model : nullptr;
  const std::vector<std::string> planned_at = CheckMicroBatches(
      model, memory_model, lengths_tokens, plan, problems);
  CheckEverySequencePlanned(planned_at, problems);
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
