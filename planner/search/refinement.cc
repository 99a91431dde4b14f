#include "planner/search/refinement.h"

#include <algorithm>
#include <utility>

namespace dcp {
namespace {

// Rounds for large batches: at least this many (more for many groups).
constexpr int kRefinementRounds = 24;
// Sequences of the slowest group a large batch's round tries to move.
constexpr int kMovesTriedPerRound = 8;
// Rounds of a thorough refinement.
constexpr int kThoroughRefineRounds = 256;
// Where no move or swap helps, the slowest group and another of at most
// this many sequences together are split anew every way (2^m splits of m
// sequences each).
constexpr int kMaxRepartitionSequences = 12;
// Sequences one run may re-time in all (the sum of the sizes of the groups
// it prices): bounds its work on large batches, where one move changes
// little.
constexpr int64_t kRefineSequenceBudget = int64_t{1} << 23;

}  // namespace

Refinement::Refinement(const BatchTable& table,
                       absl::Span<const int64_t> lengths,
                       const std::vector<int>& sizes,
                       double all_reduce_seconds, GroupTimer time_group,
                       int64_t& thorough_sequences_timed)
    : table_(table),
      lengths_(lengths),
      sizes_(sizes),
      all_reduce_seconds_(all_reduce_seconds),
      time_group_(std::move(time_group)),
      thorough_sequences_timed_(thorough_sequences_timed) {}

double Refinement::StepSeconds(const GroupTime& slowest) const {
  // As PredictPlan prices it: the slowest group (first on ties) plus what of
  // the all-reduce its last backward does not hide.
  return slowest.seconds +
         std::max(0.0, all_reduce_seconds_ - slowest.last_backward_seconds);
}

Assignment Refinement::Run(Assignment assignment) {
  const int num_groups = static_cast<int>(assignment.group_sequences.size());
  if (num_groups < 2) return assignment;
  times_.assign(num_groups, GroupTime());
  for (int g = 0; g < num_groups; ++g) {
    times_[g] = time_group_(assignment.group_sequences[g],
                            sizes_[assignment.group_size_index[g]]);
  }
  const bool small = static_cast<int64_t>(lengths_.size()) <= kThoroughSequences;
  const int rounds = small ? kThoroughRefineRounds
                           : std::clamp(2 * num_groups, kRefinementRounds, 256);
  sequences_timed_ = 0;
  for (int r = 0; r < rounds && sequences_timed_ < kRefineSequenceBudget;
       ++r) {
    const bool thorough =
        small && thorough_sequences_timed_ < kThoroughSequenceBudget;
    const int64_t timed_before = sequences_timed_;
    Round round = StartRound(assignment, thorough);
    TryMovesAndSwaps(assignment, round);
    if (thorough) thorough_sequences_timed_ += sequences_timed_ - timed_before;
    if (round.best.target < 0 && thorough) {
      const uint32_t mask = TryRepartitions(assignment, round);
      if (round.best.target >= 0) {
        ApplyRepartition(assignment, round, mask);
        continue;
      }
    }
    if (round.best.target < 0) break;
    ApplyMove(assignment, round);
  }
  return assignment;
}

Refinement::Round Refinement::StartRound(const Assignment& assignment,
                                         bool thorough) const {
  const int num_groups = static_cast<int>(assignment.group_sequences.size());
  const int num_sizes = static_cast<int>(sizes_.size());
  Round round;
  round.thorough = thorough;
  // The three slowest groups: the step after a move between two groups is
  // decided by them and the two changed groups.
  for (int g = 0; g < num_groups; ++g) {
    round.top.push_back(g);
    std::sort(round.top.begin(), round.top.end(), [&](int x, int y) {
      return times_[x].seconds != times_[y].seconds
                 ? times_[x].seconds > times_[y].seconds
                 : x < y;
    });
    if (round.top.size() > 3) round.top.pop_back();
  }
  round.slowest = round.top[0];
  round.source_size = assignment.group_size_index[round.slowest];
  round.best.step = StepSeconds(times_[round.slowest]) * (1 - 1e-9);
  if (thorough) {
    for (int g = 0; g < num_groups; ++g) {
      if (g != round.slowest) round.targets.push_back(g);
    }
  } else {
    // The least loaded group of each size, and the group whose last
    // backward hides the most of the all-reduce.
    round.targets.assign(num_sizes, -1);
    int hiding = -1;
    for (int g = 0; g < num_groups; ++g) {
      if (g == round.slowest) continue;
      int& best = round.targets[assignment.group_size_index[g]];
      if (best < 0 || times_[g].seconds < times_[best].seconds) best = g;
      if (hiding < 0 || times_[g].last_backward_seconds >
                            times_[hiding].last_backward_seconds) {
        hiding = g;
      }
    }
    if (hiding >= 0 && std::find(round.targets.begin(), round.targets.end(),
                                 hiding) == round.targets.end()) {
      round.targets.push_back(hiding);
    }
  }
  // Candidate sequences (positions in the slowest group's list, which is
  // longest first): all of them, or the biggest ones and then a spread of
  // the rest.
  const int count =
      static_cast<int>(assignment.group_sequences[round.slowest].size());
  if (thorough) {
    for (int p = 0; p < count; ++p) round.tried.push_back(p);
  } else {
    const int half = kMovesTriedPerRound / 2;
    for (int p = 0; p < count && p < half; ++p) round.tried.push_back(p);
    const int rest = count - half;
    for (int q = 0; rest > 0 && q < half; ++q) {
      const int p = half + q * rest / half;
      if (std::find(round.tried.begin(), round.tried.end(), p) ==
          round.tried.end()) {
        round.tried.push_back(p);
      }
    }
  }
  return round;
}

bool Refinement::Consider(Round& round, int position, int target, int swap,
                          const GroupTime& source_time,
                          const GroupTime& target_time) const {
  // The new slowest among the changed pair and the other leaders.
  GroupTime new_slowest = source_time;
  int new_slowest_group = round.slowest;
  auto consider = [&](int g, const GroupTime& time) {
    if (time.seconds > new_slowest.seconds ||
        (time.seconds == new_slowest.seconds && g < new_slowest_group)) {
      new_slowest = time;
      new_slowest_group = g;
    }
  };
  consider(target, target_time);
  for (int g : round.top) {
    if (g != round.slowest && g != target) consider(g, times_[g]);
  }
  const double step = StepSeconds(new_slowest);
  if (step >= round.best.step) return false;
  round.best = Best{step, position, target, swap, source_time, target_time};
  return true;
}

void Refinement::TryMovesAndSwaps(const Assignment& assignment, Round& round) {
  const std::vector<int>& source = assignment.group_sequences[round.slowest];
  const int source_size = round.source_size;
  for (int position : round.tried) {
    const int sequence = source[position];
    std::vector<int> without = source;
    without.erase(without.begin() + position);
    sequences_timed_ += static_cast<int64_t>(without.size());
    const GroupTime source_time = time_group_(without, sizes_[source_size]);
    for (int target : round.targets) {
      if (target < 0) continue;
      const int j = assignment.group_size_index[target];
      const bool fits_target = j >= table_.MinSizeIndex(sequence);
      const std::vector<int>& target_sequences =
          assignment.group_sequences[target];
      if (fits_target) {
        std::vector<int> with = target_sequences;
        table_.InsertInOrder(with, sequence);
        sequences_timed_ += static_cast<int64_t>(with.size());
        Consider(round, position, target, -1, source_time,
                 time_group_(with, sizes_[j]));
      }
      if (!round.thorough || !fits_target) continue;
      // Swaps: the target's sequence `other` comes back in exchange.
      for (int q = 0; q < static_cast<int>(target_sequences.size()); ++q) {
        const int other = target_sequences[q];
        if (lengths_[other] == lengths_[sequence] ||
            source_size < table_.MinSizeIndex(other)) {
          continue;
        }
        std::vector<int> source_with = without;
        table_.InsertInOrder(source_with, other);
        std::vector<int> target_with = target_sequences;
        target_with.erase(target_with.begin() + q);
        table_.InsertInOrder(target_with, sequence);
        sequences_timed_ +=
            static_cast<int64_t>(source_with.size() + target_with.size());
        Consider(round, position, target, q,
                 time_group_(source_with, sizes_[source_size]),
                 time_group_(target_with, sizes_[j]));
      }
    }
  }
}

uint32_t Refinement::TryRepartitions(const Assignment& assignment,
                                     Round& round) {
  const std::vector<int>& source = assignment.group_sequences[round.slowest];
  const int source_size = round.source_size;
  uint32_t best_mask = 0;
  for (int target : round.targets) {
    const std::vector<int>& target_sequences =
        assignment.group_sequences[target];
    std::vector<int> both = source;
    both.insert(both.end(), target_sequences.begin(), target_sequences.end());
    std::sort(both.begin(), both.end(),
              [&](int a, int b) { return table_.LongerFirst(a, b); });
    const int m = static_cast<int>(both.size());
    if (m > kMaxRepartitionSequences) continue;
    const int j = assignment.group_size_index[target];
    const int64_t cost = (int64_t{1} << m) * m;
    if (thorough_sequences_timed_ + cost > kThoroughSequenceBudget) continue;
    thorough_sequences_timed_ += cost;
    for (uint32_t mask = 0; mask < (uint32_t{1} << m); ++mask) {
      std::vector<int> to_source;
      std::vector<int> to_target;
      bool fits = true;
      for (int k = 0; k < m && fits; ++k) {
        if (mask >> k & 1) {
          fits = table_.MinSizeIndex(both[k]) <= source_size;
          to_source.push_back(both[k]);
        } else {
          fits = table_.MinSizeIndex(both[k]) <= j;
          to_target.push_back(both[k]);
        }
      }
      if (!fits) continue;
      if (Consider(round, -1, target, -1,
                   time_group_(to_source, sizes_[source_size]),
                   time_group_(to_target, sizes_[j]))) {
        best_mask = mask;
      }
    }
  }
  return best_mask;
}

void Refinement::ApplyRepartition(Assignment& assignment, const Round& round,
                                  uint32_t mask) {
  std::vector<int>& source = assignment.group_sequences[round.slowest];
  std::vector<int>& target = assignment.group_sequences[round.best.target];
  std::vector<int> both = source;
  both.insert(both.end(), target.begin(), target.end());
  std::sort(both.begin(), both.end(),
            [&](int a, int b) { return table_.LongerFirst(a, b); });
  source.clear();
  target.clear();
  for (int k = 0; k < static_cast<int>(both.size()); ++k) {
    (mask >> k & 1 ? source : target).push_back(both[k]);
  }
  times_[round.slowest] = round.best.source_time;
  times_[round.best.target] = round.best.target_time;
}

void Refinement::ApplyMove(Assignment& assignment, const Round& round) {
  std::vector<int>& source = assignment.group_sequences[round.slowest];
  const int sequence = source[round.best.position];
  source.erase(source.begin() + round.best.position);
  std::vector<int>& target = assignment.group_sequences[round.best.target];
  if (round.best.swap >= 0) {
    const int other = target[round.best.swap];
    target.erase(target.begin() + round.best.swap);
    table_.InsertInOrder(source, other);
  }
  table_.InsertInOrder(target, sequence);
  times_[round.slowest] = round.best.source_time;
  times_[round.best.target] = round.best.target_time;
}

}  // namespace dcp
