#include "planner/search/layout_ranking.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/plan/layout.h"

namespace dcp {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Multiples of the lower bound tried as the step-time target that decides how
// many GPUs each SP size gets.
constexpr double kTargetFactors[] = {1.0, 1.03, 1.07, 1.15, 1.3, 1.5, 2.0, 3.0};
// Batches up to which layout candidates also take sizes by least
// GPU-seconds (SizeChoice::kLeastGpuSeconds).
constexpr int64_t kLeastGpuSecondsSequences = int64_t{1} << 14;
// Layouts priced exactly: 4 to 16, this many sequences' worth.
constexpr int64_t kExactlyPricedSequences = int64_t{1} << 10;

// How a size's work becomes whole groups.
enum class Rounding { kDown, kNearest, kUp };
// Which size a length class is given for the target: the smallest that
// runs it within the target, or of those within it the one of least
// GPU-seconds (size x estimate: a larger group that spares a sequence its
// recompute may cost less GPU time than the smallest that holds it).
enum class SizeChoice { kSmallest, kLeastGpuSeconds };

// Groups per size index for a step-time target; empty if it needs more
// GPUs than the world has.
std::vector<int> CountsForTarget(const BatchTable& table,
                                 const std::vector<int>& sizes, int world,
                                 double target, Rounding rounding,
                                 SizeChoice choice) {
  const int num_sizes = static_cast<int>(sizes.size());
  std::vector<double> work(num_sizes, 0);
  std::vector<bool> needs_size(num_sizes, false);
  // Per length class: every sequence of a class makes the same choice.
  for (size_t c = 0; c < static_cast<size_t>(table.num_classes()); ++c) {
    const double* estimate = table.class_estimates(static_cast<int>(c));
    // The smallest size that runs it within the target, else its fastest.
    int chosen = -1;
    double fastest = kInfinity;
    int fastest_index = table.class_min_size_index(c);
    double least_gpu_seconds = kInfinity;
    for (int j = table.class_min_size_index(c); j < num_sizes; ++j) {
      const double seconds = estimate[j];
      if (seconds <= target) {
        if (choice == SizeChoice::kSmallest) {
          chosen = j;
          break;
        }
        const double gpu_seconds = seconds * sizes[j];
        if (gpu_seconds < least_gpu_seconds) {
          least_gpu_seconds = gpu_seconds;
          chosen = j;
        }
        continue;
      }
      if (seconds < fastest) {
        fastest = seconds;
        fastest_index = j;
      }
    }
    if (chosen < 0) chosen = fastest_index;
    work[chosen] += static_cast<double>(table.class_count(c)) * estimate[chosen];
    needs_size[table.class_min_size_index(c)] = true;
  }
  // Whole groups for the work of each size (rounded down, up or to the
  // nearest: the caller tries each); a size some sequence needs and no
  // larger group can serve gets at least one group.
  std::vector<int> counts(num_sizes, 0);
  int used = 0;
  for (int j = num_sizes - 1; j >= 0; --j) {
    const double groups = work[j] / target;
    switch (rounding) {
      case Rounding::kDown:
        counts[j] = static_cast<int>(std::floor(groups + 1e-9));
        break;
      case Rounding::kNearest:
        counts[j] = static_cast<int>(std::floor(groups + 0.5));
        break;
      case Rounding::kUp:
        counts[j] = static_cast<int>(std::ceil(groups - 1e-9));
        break;
    }
    if (counts[j] == 0 && needs_size[j] && used == 0) counts[j] = 1;
    used += counts[j] * sizes[j];
  }
  if (used > world) return {};
  // Spare GPUs go where they cut the most load per GPU.
  while (used < world) {
    int best = -1;
    double best_gain = -1;
    for (int j = 0; j < num_sizes; ++j) {
      if (sizes[j] > world - used) continue;
      // Load removed from each group of this size per GPU added.
      const double gain =
          counts[j] == 0
              ? work[j] / sizes[j]
              : work[j] / counts[j] / (counts[j] + 1) / sizes[j];
      if (gain > best_gain) {
        best_gain = gain;
        best = j;
      }
    }
    ++counts[best];  // size 1 (index 0) always fits
    used += sizes[best];
  }
  return counts;
}

}  // namespace

std::optional<Assignment> AssignGreedily(const BatchTable& table,
                                         const std::vector<int>& sizes,
                                         const std::vector<int>& counts,
                                         bool keep_sequences) {
  const int num_sizes = static_cast<int>(sizes.size());
  Assignment assignment;
  using Load = std::pair<double, int>;  // (seconds, group)
  std::vector<std::priority_queue<Load, std::vector<Load>, std::greater<Load>>>
      lightest(num_sizes);
  for (int j = num_sizes - 1; j >= 0; --j) {
    for (int c = 0; c < counts[j]; ++c) {
      const int group = static_cast<int>(assignment.group_size_index.size());
      assignment.group_size_index.push_back(j);
      lightest[j].push({0.0, group});
    }
  }
  const int num_items = static_cast<int>(table.num_items());
  std::vector<int> item_group(keep_sequences ? num_items : 0);
  for (int item = 0; item < num_items; ++item) {
    const double* estimate = table.item_estimates(item);
    int best = -1;
    double best_finish = kInfinity;
    for (int j = table.item_min_size_index(item); j < num_sizes; ++j) {
      if (lightest[j].empty()) continue;
      const double load = lightest[j].top().first;
      const double finish = load + estimate[j] +
                            (load == 0 ? table.micro_batch_overhead(j) : 0);
      if (finish < best_finish) {
        best_finish = finish;
        best = j;
      }
    }
    if (best < 0) return std::nullopt;  // no group large enough
    auto [load, group] = lightest[best].top();
    lightest[best].pop();
    if (keep_sequences) item_group[item] = group;
    lightest[best].push({best_finish, group});
    assignment.estimated_seconds =
        std::max(assignment.estimated_seconds, best_finish);
  }
  if (keep_sequences) {
    // Each group's list in LongerFirst order, from the global one.
    assignment.group_sequences.resize(assignment.group_size_index.size());
    for (int i : table.longest_first()) {
      assignment.group_sequences[item_group[table.item_of(i)]].push_back(i);
    }
  }
  return assignment;
}

std::vector<std::vector<int>> RankLayouts(
    const BatchTable& table, const std::vector<int>& sizes,
    const ClusterSpec& cluster,
    const std::function<void(std::string)>& progress) {
  const int world = cluster.NumGpus();
  const int64_t num_sequences = table.num_sequences();
  const int num_sizes = static_cast<int>(sizes.size());

  std::vector<std::vector<int>> candidates;
  for (double factor : kTargetFactors) {
    for (Rounding rounding :
         {Rounding::kDown, Rounding::kNearest, Rounding::kUp}) {
      std::vector<int> counts =
          CountsForTarget(table, sizes, world, table.lower_bound() * factor,
                          rounding, SizeChoice::kSmallest);
      if (!counts.empty()) candidates.push_back(std::move(counts));
    }
    // Sizes by least GPU-seconds too, rounded to the nearest, where the
    // extra starting points (each an Assign of the whole batch) are cheap.
    if (num_sequences <= kLeastGpuSecondsSequences) {
      std::vector<int> counts = CountsForTarget(
          table, sizes, world, table.lower_bound() * factor,
          Rounding::kNearest, SizeChoice::kLeastGpuSeconds);
      if (!counts.empty()) candidates.push_back(std::move(counts));
    }
  }
  // Homogeneous layouts (every group the same size) keep the static ways of
  // training inside the search space.
  const int needed = table.max_min_size_index();
  for (int j = needed; j < num_sizes; ++j) {
    std::vector<int> counts(num_sizes, 0);
    counts[j] = world / sizes[j];
    if (counts[j] * sizes[j] == world) candidates.push_back(std::move(counts));
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()),
                   candidates.end());

  // Hill-climb over layouts from every starting point: merge groups of one
  // size into a larger one or split one, judged by the estimated makespan of
  // the greedy assignment; the budget shrinks as batches grow.
  const int64_t budget = std::clamp<int64_t>(
      int64_t{1'500'000} /
          (num_sequences * num_sizes + 1),
      8, 64);
  int64_t evaluations = 0;
  std::map<std::vector<int>, double> estimated;  // layout -> makespan
  auto evaluate = [&](const std::vector<int>& counts) -> double {
    auto it = estimated.find(counts);
    if (it != estimated.end()) return it->second;
    ++evaluations;
    double seconds = kInfinity;
    std::vector<int> group_sizes;
    for (int j = 0; j < num_sizes; ++j) {
      group_sizes.insert(group_sizes.end(), counts[j], sizes[j]);
    }
    if (PlaceGroups(group_sizes, cluster).ok()) {
      std::optional<Assignment> assignment =
          AssignGreedily(table, sizes, counts, /*keep_sequences=*/false);
      if (assignment) seconds = assignment->estimated_seconds;
    }
    estimated.emplace(counts, seconds);
    return seconds;
  };
  for (const std::vector<int>& start : candidates) {
    std::vector<int> current = start;
    double current_seconds = evaluate(current);
    while (evaluations < budget) {
      std::vector<int> best_neighbour;
      double best_seconds = current_seconds * (1 - 1e-9);
      for (int a = 0; a < num_sizes; ++a) {
        for (int b = a + 1; b < num_sizes; ++b) {
          if (sizes[b] % sizes[a] != 0) continue;
          const int ratio = sizes[b] / sizes[a];
          for (int direction : {+1, -1}) {
            std::vector<int> neighbour = current;
            neighbour[a] -= direction * ratio;
            neighbour[b] += direction;
            if (neighbour[a] < 0 || neighbour[b] < 0) continue;
            const double seconds = evaluate(neighbour);
            if (seconds < best_seconds) {
              best_seconds = seconds;
              best_neighbour = std::move(neighbour);
            }
          }
        }
      }
      if (best_neighbour.empty()) break;
      current = std::move(best_neighbour);
      current_seconds = best_seconds;
    }
  }
  if (progress) {
    progress(absl::StrCat("ranked ", estimated.size(),
                          " layouts of SP groups by estimate"));
  }
  // Price the most promising layouts exactly, and the homogeneous ones.
  std::vector<std::pair<double, std::vector<int>>> ranked;
  for (const auto& [counts, seconds] : estimated) {
    if (seconds < kInfinity) ranked.push_back({seconds, counts});
  }
  std::sort(ranked.begin(), ranked.end());
  // The estimates ignore packing, so more of them are priced exactly where
  // pricing is cheap (4 to 16 layouts, fewer as batches grow).
  const size_t exactly_priced = static_cast<size_t>(std::clamp<int64_t>(
      kExactlyPricedSequences / (num_sequences + 1),
      4, 16));
  if (ranked.size() > exactly_priced) ranked.resize(exactly_priced);
  for (const auto& [counts, seconds] : estimated) {
    const bool homogeneous =
        std::count(counts.begin(), counts.end(), 0) == num_sizes - 1;
    if (homogeneous && seconds < kInfinity &&
        std::none_of(ranked.begin(), ranked.end(),
                     [&](const auto& r) { return r.second == counts; })) {
      ranked.push_back({seconds, counts});
    }
  }

  std::vector<std::vector<int>> layouts;
  for (auto& [unused, counts] : ranked) layouts.push_back(std::move(counts));
  return layouts;
}

}  // namespace dcp
