#include "planner/strategies/megatron_dev_dyncp.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/plan/batch_check.h"
#include "planner/strategies/cap_tuning.h"

namespace dcp {
namespace {

// How far above the round's reference load a placement may go (5%).
constexpr double kLoadCapSlack = 0.05;

struct Sequence {
  int index = 0;
  int64_t length = 0;
};

// A group while its round is being formed.
struct OpenGroup {
  int first_rank = 0;
  int size = 0;
  // Tokens per rank packed so far (each sequence adds length / size).
  double packed_tokens_per_rank = 0;
  // Work proxy of each member rank (all members run the same sequences).
  double load = 0;
  std::vector<Sequence> sequences;
};

double Work(int64_t length, int cp) {
  return static_cast<double>(length) * static_cast<double>(length) / cp;
}

// The round former for one batch.
class RoundFormer {
 public:
  RoundFormer(int world, const PackedCpOptions& options)
      : world_(world), options_(options) {}

  // The least CP size of a sequence: the next power of two of
  // length / cap, at least the minimum, at most the largest.
  int LeastCp(int64_t length) const {
    int cp = 1;
    while (static_cast<int64_t>(cp) * options_.max_tokens_per_rank < length &&
           cp < options_.largest_cp_size) {
      cp *= 2;
    }
    return std::min(std::max(cp, options_.min_cp_size),
                    options_.largest_cp_size);
  }

  // Forms one round from `sequences` (longest first, stable); what the round
  // does not take is returned in the same order.
  PackedCpRound Next(std::vector<Sequence>& sequences) const {
    std::vector<OpenGroup> groups;
    std::vector<Sequence> leftovers;
    int next_free = 0;
    const Sequence& tallest = sequences.front();
    const int tallest_cp = LeastCp(tallest.length);
    groups.push_back(OpenGroup{0,
                               tallest_cp,
                               static_cast<double>(tallest.length) / tallest_cp,
                               Work(tallest.length, tallest_cp),
                               {tallest}});
    next_free = tallest_cp;
    // Megatron's cap is tallest x per-rank cap; where the tallest is clamped
    // to the largest CP size, its own load is the reference instead.
    const double load_cap =
        (1 + kLoadCapSlack) *
        std::max(static_cast<double>(tallest.length) *
                     static_cast<double>(options_.max_tokens_per_rank),
                 Work(tallest.length, tallest_cp));
    for (size_t s = 1; s < sequences.size(); ++s) {
      const Sequence& sequence = sequences[s];
      if (!Place(sequence, load_cap, groups, next_free)) {
        leftovers.push_back(sequence);
      }
    }
    while (next_free < world_) {
      // Megatron falls back to one group of every rank where doubling
      // cannot fill a world that is not a power of two; that group would not
      // be a legal SP size here, so the ranks left idle for the round.
      if (!DoubleASmallestGroup(groups, next_free)) break;
    }
    sequences = std::move(leftovers);
    PackedCpRound round;
    for (OpenGroup& group : groups) {
      PackedCpGroup out{group.first_rank, group.size, {}};
      for (const Sequence& seq : group.sequences) {
        out.sequence_indices.push_back(seq.index);
      }
      round.groups.push_back(std::move(out));
    }
    return round;
  }

 private:
  // The best placement of `sequence` (least projected maximum rank load
  // within `load_cap`; the first found on ties), applied; false if none.
  bool Place(const Sequence& sequence, double load_cap,
             std::vector<OpenGroup>& groups, int& next_free) const {
    // The two largest group loads give every "max over the other ranks".
    int top = -1;
    double second_load = 0;
    for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
      if (top < 0 || groups[g].load > groups[top].load) {
        if (top >= 0) second_load = std::max(second_load, groups[top].load);
        top = g;
      } else {
        second_load = std::max(second_load, groups[g].load);
      }
    }
    const double max_load = top >= 0 ? groups[top].load : 0;
    std::optional<double> best_load;
    int best_cp = 0;
    int best_group = -1;  // -1: a new group on the free ranks.
    for (int cp = LeastCp(sequence.length); cp <= world_;) {
      const double work = Work(sequence.length, cp);
      for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
        const OpenGroup& group = groups[g];
        if (group.size != cp) continue;
        if (group.packed_tokens_per_rank +
                static_cast<double>(sequence.length) / cp >
            static_cast<double>(options_.max_tokens_per_rank)) {
          continue;
        }
        const double others = g == top ? second_load : max_load;
        const double projected = std::max(others, group.load + work);
        if (projected <= load_cap && (!best_load || projected < *best_load)) {
          best_load = projected;
          best_cp = cp;
          best_group = g;
        }
      }
      if (world_ - next_free >= cp) {
        const double projected = std::max(max_load, work);
        if (projected <= load_cap && (!best_load || projected < *best_load)) {
          best_load = projected;
          best_cp = cp;
          best_group = -1;
        }
      }
      if (cp >= options_.largest_cp_size) break;
      cp *= 2;
    }
    if (!best_load) return false;
    const double work = Work(sequence.length, best_cp);
    if (best_group < 0) {
      groups.push_back(OpenGroup{next_free, best_cp, 0, 0, {}});
      next_free += best_cp;
      best_group = static_cast<int>(groups.size()) - 1;
    }
    OpenGroup& group = groups[best_group];
    group.packed_tokens_per_rank +=
        static_cast<double>(sequence.length) / best_cp;
    group.load += work;
    group.sequences.push_back(sequence);
    return true;
  }

  // Doubles the first of the smallest groups that can grow: it takes the
  // ranks after it, and the groups after it move up. False if none can.
  bool DoubleASmallestGroup(std::vector<OpenGroup>& groups,
                            int& next_free) const {
    int smallest = world_;
    for (const OpenGroup& group : groups) {
      smallest = std::min(smallest, group.size);
    }
    const int grown = std::min(2 * smallest, world_);
    const int added = grown - smallest;
    if (added <= 0 || grown > options_.largest_cp_size ||
        added > world_ - next_free) {
      return false;
    }
    for (OpenGroup& group : groups) {
      if (group.size != smallest) continue;
      const int end = group.first_rank + group.size - 1;
      if (end + added >= world_) continue;
      for (OpenGroup& other : groups) {
        if (other.first_rank > end) other.first_rank += added;
      }
      group.size = grown;
      group.load = 0;
      for (const Sequence& seq : group.sequences) {
        group.load += Work(seq.length, grown);
      }
      next_free += added;
      return true;
    }
    return false;
  }

  const int world_;
  const PackedCpOptions options_;
};

bool IsPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

absl::StatusOr<std::vector<PackedCpRound>> ScheduleMegatronDevDynCp(
    absl::Span<const int64_t> lengths_tokens, int world_size,
    const PackedCpOptions& options) {
  if (absl::Status status = ValidateBatch(lengths_tokens); !status.ok()) {
    return status;
  }
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size = ", world_size, "; give at least 1 rank"));
  }
  if (options.max_tokens_per_rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max tokens per rank = ", options.max_tokens_per_rank,
                     "; give at least 1"));
  }
  if (!IsPowerOfTwo(options.min_cp_size) ||
      !IsPowerOfTwo(options.largest_cp_size) ||
      options.min_cp_size > options.largest_cp_size ||
      options.largest_cp_size > world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CP sizes from ", options.min_cp_size, " to ", options.largest_cp_size,
        " over ", world_size,
        " ranks; both must be powers of two, the minimum at most the largest "
        "and the largest at most the world"));
  }
  std::vector<Sequence> remaining;
  remaining.reserve(lengths_tokens.size());
  for (int i = 0; i < static_cast<int>(lengths_tokens.size()); ++i) {
    remaining.push_back({i, lengths_tokens[i]});
  }
  std::stable_sort(
      remaining.begin(), remaining.end(),
      [](const Sequence& a, const Sequence& b) { return a.length > b.length; });
  RoundFormer former(world_size, options);
  std::vector<PackedCpRound> rounds;
  while (!remaining.empty()) rounds.push_back(former.Next(remaining));
  return rounds;
}

std::string MegatronDevDynCpSetting::Describe() const {
  return absl::StrCat("cap ", max_tokens_per_rank, " tokens/rank, ",
                      checkpointed_layers, " layers checkpointed");
}

absl::StatusOr<PhasedPlan> PlanMegatronDevDynCp(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens,
    const MegatronDevDynCpSetting& setting) {
  absl::StatusOr<int> largest_cp =
      LargestPowerOfTwoCpSize(cost_model, sp_sizes, "megatron-dyncp");
  if (!largest_cp.ok()) return largest_cp.status();
  const ClusterSpec& cluster = cost_model.cluster();
  PackedCpOptions options;
  options.max_tokens_per_rank = setting.max_tokens_per_rank;
  options.largest_cp_size = *largest_cp;
  absl::StatusOr<std::vector<PackedCpRound>> rounds =
      ScheduleMegatronDevDynCp(lengths_tokens, cluster.NumGpus(), options);
  if (!rounds.ok()) return rounds.status();
  PhasedPlan plan;
  plan.strategy = "megatron-dyncp";
  plan.barriers = false;
  for (const PackedCpRound& round : *rounds) {
    std::vector<PhaseGroup> groups;
    for (const PackedCpGroup& group : round.groups) {
      MicroBatchPlan micro_batch;
      micro_batch.sequence_indices = group.sequence_indices;
      micro_batch.checkpointed_layers = setting.checkpointed_layers;
      groups.push_back(PhaseGroup{group.size, {std::move(micro_batch)}});
    }
    absl::StatusOr<Plan> phase = LayOutPhase(cluster, std::move(groups));
    if (!phase.ok()) return phase.status();
    plan.phases.push_back(*std::move(phase));
  }
  PredictUnbarrieredPhasedPlan(cost_model, lengths_tokens, plan);
  return plan;
}

absl::StatusOr<MegatronDevDynCpSetting> TuneMegatronDevDynCp(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    const std::vector<std::vector<int64_t>>& batches) {
  if (batches.empty()) {
    return absl::InvalidArgumentError(
        "no batches to tune megatron-dyncp's cap on");
  }
  // The memory capacity: what a rank holds at full recompute.
  const int64_t capacity =
      cost_model.MaxTokensPerRank(cost_model.model().num_layers, /*sp_size=*/1);
  absl::StatusOr<TunedCap> tuned = TuneCap(
      CapGrid(capacity, /*with_capacity=*/true),
      [&](int64_t cap) {
        MegatronDevDynCpSetting setting;
        setting.max_tokens_per_rank = cap;
        return PriceCapOverRun(
            cost_model, batches, cap, /*per_micro_batch=*/false,
            [&](absl::Span<const int64_t> batch) {
              return PlanMegatronDevDynCp(cost_model, sp_sizes, batch,
                                          setting);
            });
      },
      "megatron-dyncp");
  if (!tuned.ok()) return tuned.status();
  MegatronDevDynCpSetting setting;
  setting.max_tokens_per_rank = tuned->cap;
  setting.checkpointed_layers = tuned->outcome.checkpointed_layers;
  setting.mean_step_seconds = tuned->outcome.mean_step_seconds;
  return setting;
}

}  // namespace dcp
