#include "planner/strategies/megatron_dyncp.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/plan/batch_check.h"
#include "planner/strategies/cap_tuning.h"

namespace dcp {
namespace {

// The balance slack of Megatron's scheduler (5%), and how far a run of
// equal work may exceed its target before it is closed (10%).
constexpr double kBalanceSlack = 0.05;
constexpr double kRunOvershoot = 1.10;

struct SubSample {
  int index = 0;
  int64_t length = 0;
};

// A CP group of one round: its size and the sub-samples it runs, in order.
struct RoundGroup {
  int size = 0;
  std::vector<SubSample> sub_samples;
  // Work proxy of every member rank (they all run the same sub-samples).
  double load = 0;
};

// The scheduler of one batch at one cap.
class RoundScheduler {
 public:
  RoundScheduler(int64_t max_tokens_per_rank, int world, int largest_cp)
      : cap_(max_tokens_per_rank), world_(world), largest_cp_(largest_cp) {}

  // Megatron's CP size for a sub-sample, clamped to the largest legal one.
  int CpSize(int64_t length) const {
    int cp = 1;
    while (cp < largest_cp_ && static_cast<int64_t>(cp) * cap_ < length) {
      cp *= 2;
    }
    return cp;
  }
  double Work(int64_t length) const {
    return static_cast<double>(length) * static_cast<double>(length) /
           CpSize(length);
  }

  // One round over `remaining` (consumed; the leftovers are returned in
  // `remaining` for the next round, in Megatron's order).
  std::vector<RoundGroup> NextRound(std::vector<SubSample>& remaining) const {
    std::vector<std::deque<SubSample>> runs = EqualWorkRuns(remaining);
    std::vector<RoundGroup> groups;
    int free_ranks = world_;
    std::optional<int> first_cp;
    bool check_balance = false;
    while (!runs.empty()) {
      // The head of the first run that can be placed.
      int run = -1;
      for (int r = 0; r < static_cast<int>(runs.size()); ++r) {
        if (runs[r].empty()) continue;
        const int needed = CpSize(runs[r].front().length);
        if (free_ranks >= needed || FindGroup(groups, needed) >= 0) {
          run = r;
          break;
        }
      }
      if (run < 0) break;
      const SubSample sub_sample = runs[run].front();
      const int needed = CpSize(sub_sample.length);
      if (!first_cp) first_cp = needed;
      // Fresh GPUs (load 0) beat any existing group (load > 0).
      int g;
      if (free_ranks >= needed) {
        groups.push_back(RoundGroup{needed, {}, 0});
        free_ranks -= needed;
        g = static_cast<int>(groups.size()) - 1;
      } else {
        g = FindGroup(groups, needed);
      }
      groups[g].sub_samples.push_back(sub_sample);
      groups[g].load += Work(sub_sample.length);
      runs[run].pop_front();
      while (!runs.empty() && runs.front().empty()) runs.erase(runs.begin());
      if (needed < *first_cp) check_balance = true;
      if (check_balance && !runs.empty() && Balanced(groups, free_ranks)) {
        break;
      }
    }
    remaining.clear();
    for (const std::deque<SubSample>& r : runs) {
      remaining.insert(remaining.end(), r.begin(), r.end());
    }
    TrimOverload(groups, free_ranks, remaining);
    FillEmptyRanks(groups, free_ranks);
    return groups;
  }

 private:
  // Contiguous runs of the (longest-first) list with about equal work, as
  // many as distinct CP sizes; a run closes when the next sub-sample would
  // take it over 110% of the target, or when the sub-samples left are no
  // more than the runs still to open (Megatron's count, as published).
  std::vector<std::deque<SubSample>> EqualWorkRuns(
      const std::vector<SubSample>& list) const {
    std::set<int> sizes;
    double total = 0;
    for (const SubSample& s : list) {
      sizes.insert(CpSize(s.length));
      total += Work(s.length);
    }
    const int k = static_cast<int>(sizes.size());
    const double target = total / k;
    std::vector<std::deque<SubSample>> runs;
    std::deque<SubSample> current;
    double current_work = 0;
    int remaining_k = k;
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const double work = Work(list[i].length);
      const int left = static_cast<int>(list.size()) - i;
      if (!current.empty() &&
          (current_work + work > target * kRunOvershoot ||
           left <= remaining_k - static_cast<int>(runs.size()))) {
        runs.push_back(std::move(current));
        current.clear();
        current_work = 0;
        --remaining_k;
      }
      current.push_back(list[i]);
      current_work += work;
    }
    if (!current.empty()) runs.push_back(std::move(current));
    return runs;
  }

  // The least-loaded group of exactly `size` ranks, or -1.
  static int FindGroup(const std::vector<RoundGroup>& groups, int size) {
    int best = -1;
    for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
      if (groups[g].size != size) continue;
      if (best < 0 || groups[g].load < groups[best].load) best = g;
    }
    return best;
  }

  // Free ranks have load 0.
  static std::pair<double, double> MinMaxLoad(
      const std::vector<RoundGroup>& groups, int free_ranks) {
    double lo = free_ranks > 0 ? 0 : -1, hi = 0;
    for (const RoundGroup& group : groups) {
      hi = std::max(hi, group.load);
      lo = lo < 0 ? group.load : std::min(lo, group.load);
    }
    return {std::max(lo, 0.0), hi};
  }
  static bool Balanced(const std::vector<RoundGroup>& groups, int free_ranks) {
    auto [lo, hi] = MinMaxLoad(groups, free_ranks);
    return hi - lo <= kBalanceSlack * hi;
  }

  // While the spread is over the slack and no rank is empty, the most
  // loaded group (the first of equals) gives its last sub-sample back if
  // that narrows the spread and it keeps at least one.
  void TrimOverload(std::vector<RoundGroup>& groups, int free_ranks,
                    std::vector<SubSample>& remaining) const {
    for (;;) {
      auto [lo, hi] = MinMaxLoad(groups, free_ranks);
      if (hi - lo <= kBalanceSlack * hi || lo == 0) return;
      int top = 0;
      for (int g = 1; g < static_cast<int>(groups.size()); ++g) {
        if (groups[g].load > groups[top].load) top = g;
      }
      RoundGroup& group = groups[top];
      if (group.sub_samples.size() <= 1) return;
      const SubSample last = group.sub_samples.back();
      const double work = Work(last.length);
      group.load -= work;
      auto [new_lo, new_hi] = MinMaxLoad(groups, free_ranks);
      if (new_hi - new_lo < hi - lo) {
        group.sub_samples.pop_back();
        remaining.push_back(last);
      } else {
        group.load += work;
        return;
      }
    }
  }

  // Empty ranks take part by doubling the first of the smallest groups
  // (up to the largest legal CP size), repeatedly.
  void FillEmptyRanks(std::vector<RoundGroup>& groups, int& free_ranks) const {
    while (free_ranks > 0 && !groups.empty()) {
      int smallest = 0;
      for (int g = 1; g < static_cast<int>(groups.size()); ++g) {
        if (groups[g].size < groups[smallest].size) smallest = g;
      }
      const int size = groups[smallest].size;
      const int grown = std::min(2 * size, world_);
      if (grown > largest_cp_ || grown - size > free_ranks) return;
      free_ranks -= grown - size;
      groups[smallest].size = grown;
    }
  }

  const int64_t cap_;
  const int world_;
  const int largest_cp_;
};

// The round's groups as a phase, one micro-batch per sub-sample.
absl::StatusOr<Plan> RoundToPhase(const ClusterSpec& cluster,
                                  const std::vector<RoundGroup>& groups,
                                  int checkpointed_layers) {
  std::vector<PhaseGroup> phase_groups;
  for (const RoundGroup& group : groups) {
    PhaseGroup phase_group;
    phase_group.sp_size = group.size;
    for (const SubSample& s : group.sub_samples) {
      MicroBatchPlan micro_batch;
      micro_batch.sequence_indices = {s.index};
      micro_batch.checkpointed_layers = checkpointed_layers;
      phase_group.micro_batches.push_back(std::move(micro_batch));
    }
    phase_groups.push_back(std::move(phase_group));
  }
  return LayOutPhase(cluster, std::move(phase_groups));
}

}  // namespace

std::string MegatronDynCpSetting::Describe() const {
  return absl::StrCat(
      "cap ", max_tokens_per_rank, " tokens/rank, ",
      least_recompute_per_micro_batch
          ? absl::StrCat("least recompute per micro-batch, "
                         "up to ",
                         checkpointed_layers, " layers")
          : absl::StrCat(checkpointed_layers, " layers checkpointed"));
}

absl::StatusOr<PhasedPlan> PlanMegatronDynCp(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens,
    const MegatronDynCpSetting& setting) {
  if (absl::Status status = ValidateBatch(lengths_tokens); !status.ok()) {
    return status;
  }
  if (setting.max_tokens_per_rank < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "megatron-hcp max tokens per rank = ", setting.max_tokens_per_rank,
        "; give at least 1"));
  }
  absl::StatusOr<int> largest_cp =
      LargestPowerOfTwoCpSize(cost_model, sp_sizes, "megatron-hcp");
  if (!largest_cp.ok()) return largest_cp.status();
  const int world = cost_model.cluster().NumGpus();
  RoundScheduler scheduler(setting.max_tokens_per_rank, world, *largest_cp);
  std::vector<SubSample> remaining;
  for (int i = 0; i < static_cast<int>(lengths_tokens.size()); ++i) {
    remaining.push_back({i, lengths_tokens[i]});
  }
  std::stable_sort(remaining.begin(), remaining.end(),
                   [](const SubSample& a, const SubSample& b) {
                     return a.length > b.length;
                   });
  PhasedPlan plan;
  plan.strategy = "megatron-hcp";
  while (!remaining.empty()) {
    absl::StatusOr<Plan> phase =
        RoundToPhase(cost_model.cluster(), scheduler.NextRound(remaining),
                     setting.checkpointed_layers);
    if (!phase.ok()) return phase.status();
    plan.phases.push_back(*std::move(phase));
  }
  if (setting.least_recompute_per_micro_batch) {
    // A micro-batch that fits nowhere keeps the setting's layers (and
    // fails validation).
    FewestCheckpointedLayersThatFit(cost_model, lengths_tokens, plan,
                                    /*set_each=*/true);
  }
  PredictPhasedPlan(cost_model, lengths_tokens, plan);
  return plan;
}

absl::StatusOr<MegatronDynCpSetting> TuneMegatronDynCp(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    const std::vector<std::vector<int64_t>>& batches,
    bool least_recompute_per_micro_batch) {
  if (batches.empty()) {
    return absl::InvalidArgumentError(
        "no batches to tune megatron-hcp's cap on");
  }
  // The most any rank holds: full recompute, one copy of the KV heads.
  const int64_t most_per_rank =
      cost_model.MaxTokensPerRank(cost_model.model().num_layers, /*sp_size=*/1);
  const auto setting_at = [&](int64_t cap) {
    MegatronDynCpSetting setting;
    setting.max_tokens_per_rank = cap;
    setting.least_recompute_per_micro_batch = least_recompute_per_micro_batch;
    return setting;
  };
  absl::StatusOr<TunedCap> tuned = TuneCap(
      CapGrid(most_per_rank, /*with_capacity=*/false),
      [&](int64_t cap) {
        const MegatronDynCpSetting setting = setting_at(cap);
        return PriceCapOverRun(
            cost_model, batches, cap, least_recompute_per_micro_batch,
            [&](absl::Span<const int64_t> batch) {
              return PlanMegatronDynCp(cost_model, sp_sizes, batch, setting);
            });
      },
      "megatron-hcp");
  if (!tuned.ok()) return tuned.status();
  MegatronDynCpSetting setting = setting_at(tuned->cap);
  setting.checkpointed_layers = tuned->outcome.checkpointed_layers;
  setting.mean_step_seconds = tuned->outcome.mean_step_seconds;
  return setting;
}

}  // namespace dcp
