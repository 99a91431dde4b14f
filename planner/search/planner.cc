// Over 600 lines by choice: this file is one class, PlanSearch, the search
// of one batch (layouts, assignment, packing, refinement with its thorough
// moves on small batches, group-size changes, all-reduce hiding);
// its phases share the batch's state, and splitting them across files would
// spread one algorithm over several. Planner::PlanBatch at the end is the
// only public entry.

#include "planner/search/planner.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <utility>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/strategies/baselines.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/layout.h"
#include "planner/search/lower_bound.h"
#include "planner/search/packing.h"

namespace dcp {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Multiples of the lower bound tried as the step-time target that decides how
// many GPUs each SP size gets.
constexpr double kTargetFactors[] = {1.0, 1.03, 1.07, 1.15, 1.3, 1.5, 2.0, 3.0};
// Local-search budget after the best candidate is chosen.
constexpr int kRefinementRounds = 24;
constexpr int kMovesTriedPerRound = 8;
// Batches up to which layout candidates also take sizes by least
// GPU-seconds (SizeChoice::kLeastGpuSeconds).
constexpr int64_t kLeastGpuSecondsSequences = int64_t{1} << 14;
// Layouts priced exactly: 4 to 16, this many sequences' worth.
constexpr int64_t kExactlyPricedSequences = int64_t{1} << 10;
// Sequences up to which every sequence is placed on its own by Assign;
// larger batches are placed in about this many items (see BuildAssignItems).
constexpr int kAssignItems = 1 << 16;
// Batches of at most this many sequences are refined thoroughly: every
// move and swap between the slowest group and every other, from each of
// the best few layouts, for up to this many rounds.
constexpr int64_t kThoroughRefineSequences = 64;
constexpr int kThoroughRefineRounds = 256;
constexpr size_t kThoroughRefineStarts = 4;
// Where no move or swap helps, the slowest group and another of at most
// this many sequences together are split anew every way (2^m splits of m
// sequences each).
constexpr int kMaxRepartitionSequences = 12;
// Sequences the thorough refinement (swaps, splits anew, the extra starts
// and group-size changes) may time per batch in all; past it refinement
// goes on as for larger batches.
constexpr int64_t kThoroughSequenceBudget = int64_t{1} << 15;
// Refined neighbours ChangeGroupSizes may try per search.
constexpr int kGroupSizeChanges = 32;
// Sequences Refine may re-time in all (the sum of the sizes of the groups it
// prices): bounds its work on large batches, where one move changes little.
constexpr int64_t kRefineSequenceBudget = int64_t{1} << 23;

// One candidate: which group (by size index) each group is, and which
// sequences each group runs.
struct Assignment {
  std::vector<int> group_size_index;
  // Each longest first, ties by index (PlanSearch::LongerFirst).
  std::vector<std::vector<int>> group_sequences;
  /// Largest group load by the additive estimates.
  double estimated_seconds = 0;
};

// The search for one batch. Not thread-safe; one per PlanBatch call.
class PlanSearch {
 public:
  PlanSearch(const CostModel& cost_model, const PlannerOptions& options,
             absl::Span<const int64_t> lengths_tokens, std::vector<int> sizes)
      : cost_model_(cost_model),
        options_(options),
        lengths_(lengths_tokens),
        sizes_(std::move(sizes)) {}

  absl::StatusOr<Plan> Run();

 private:
  // The whole search in the current mode (variable_accumulation_,
  // pyramid_recompute_).
  absl::StatusOr<Plan> Search();
  // Layouts worth pricing exactly, best estimate first. The estimates do not
  // depend on the mode, so they are computed once per batch.
  const std::vector<std::vector<int>>& RankedLayouts();
  std::vector<std::vector<int>> ranked_layouts_;
  absl::Status Prepare();
  // Groups per size index for a step-time target; empty if it needs more
  // GPUs than the cluster has.
  enum class Rounding { kDown, kNearest, kUp };
  // Which size a length class is given for the target: the smallest that
  // runs it within the target, or of those within it the one of least
  // GPU-seconds (size x estimate: a larger group that spares a sequence
  // its recompute may cost less GPU time than the smallest that holds it).
  enum class SizeChoice { kSmallest, kLeastGpuSeconds };
  std::vector<int> CountsForTarget(double target, Rounding rounding,
                                   SizeChoice choice) const;
  // Greedy longest-first assignment to a layout. Without `keep_sequences`
  // only the estimated makespan is filled (cheaper, for ranking layouts).
  std::optional<Assignment> Assign(const std::vector<int>& counts,
                                   bool keep_sequences = true) const;
  // Micro-batches of one group in the current mode.
  // `capacity_tokens_per_rank` overrides how full a micro-batch may get
  // (0: as full as fits without recompute).
  std::vector<MicroBatchPlan> MicroBatches(
      const std::vector<int>& sequences, int sp_size,
      int64_t capacity_tokens_per_rank = 0) const;
  // The bins MicroBatches prices, each in packing order.
  std::vector<std::vector<int>> PackMicroBatches(
      const std::vector<int>& sequences, int sp_size,
      int64_t capacity_tokens_per_rank = 0) const;
  MicroBatchShape ShapeOfBin(const std::vector<int>& bin, int sp_size) const;
  // Recompute of a micro-batch in the current mode: what it needs, or the
  // uniform setting where that is more.
  int CheckpointedLayers(const MicroBatchShape& shape) const;
  struct GroupTime {
    double seconds = 0;
    // Backward of the last micro-batch: what can hide the all-reduce.
    double last_backward_seconds = 0;
  };
  GroupTime TimeGroup(const std::vector<int>& sequences, int sp_size) const;
  // Sets the mode-wide settings (fixed accumulation count, uniform
  // recompute) from an assignment.
  void SetModeSettings(const Assignment& assignment);
  // `group_order`, if given, receives the assignment's group index of each
  // plan group.
  absl::StatusOr<Plan> ToPlan(const Assignment& assignment,
                              std::vector<int>* group_order = nullptr);
  // ToPlan(assignment)->predicted_step_seconds, bit for bit, without making
  // the plan; nullopt where ToPlan fails. Sets the mode settings as ToPlan.
  std::optional<double> PredictedStepSeconds(const Assignment& assignment);
  Assignment Refine(Assignment assignment) const;
  // Small batches: changes one group's SP size (a group split into two of
  // half its size, or the slowest merged with another of its size into one
  // of twice it), each refined; keeps the best while it gains. Sets the mode
  // settings as PredictedStepSeconds.
  void ChangeGroupSizes(Assignment& assignment, double& seconds);
  bool ThoroughBudgetLeft() const {
    return thorough_sequences_timed_ < kThoroughSequenceBudget;
  }
  // What the thorough refinement of a small batch has timed so far.
  mutable int64_t thorough_sequences_timed_ = 0;
  // Whether a static plan (PlanBucket, PlanPacked) might be predicted faster
  // than `seconds`. False when even the lower bound of plans that use only
  // the static SP size is not below it: the static plans then need not be
  // made (the bound costs a small part of making them).
  bool StaticPlanMayBeat(double seconds) const;
  // Lets the slowest groups run fewer, larger micro-batches (recomputing
  // more) when the longer last backward hides more of the gradient
  // all-reduce than the recompute costs.
  void HideAllReduce(Plan& plan, const Assignment& assignment,
                     const std::vector<int>& group_order) const;

  const CostModel& cost_model_;
  const PlannerOptions& options_;
  absl::Span<const int64_t> lengths_;
  std::vector<int> sizes_;

  // Sequences of one length are priced once: a class per distinct length.
  int MinSizeIndex(int sequence) const {
    return class_min_size_index_[class_of_[sequence]];
  }
  double Estimate(int sequence, int size_index) const {
    return estimate_[static_cast<size_t>(class_of_[sequence]) * sizes_.size() +
                     size_index];
  }
  // The order packing wants (longest first, ties by index); groups keep
  // their sequence lists in it so that packing need not sort them.
  bool LongerFirst(int a, int b) const {
    return lengths_[a] != lengths_[b] ? lengths_[a] > lengths_[b] : a < b;
  }
  void InsertInOrder(std::vector<int>& sequences, int sequence) const {
    sequences.insert(
        std::lower_bound(sequences.begin(), sequences.end(), sequence,
                         [&](int a, int b) { return LongerFirst(a, b); }),
        sequence);
  }
  // Groups consecutive sequences of order_ into the items Assign places.
  void BuildAssignItems();
  void ReportProgress(std::string message) const {
    if (options_.progress) options_.progress(PlanningProgress{std::move(message)});
  }

  double lower_bound_ = 0;
  // Whether every sum of squared lengths of the batch is exact in a double
  // (the whole batch's sum is below 2^53), so that a micro-batch's shape,
  // and so its cost, does not depend on the order its sequences are added.
  bool squares_exact_ = false;
  std::vector<int> class_of_;         // per sequence: its length's class
  std::vector<int64_t> class_count_;  // per class: how many sequences
  std::vector<int> class_min_size_index_;
  // estimate_[c * sizes + j]: seconds a sequence of class c adds to a group
  // of size j (kInfinity where it does not fit).
  std::vector<double> estimate_;
  std::vector<int> order_;  // sequences, biggest first
  // Sequences longest first, ties by index (LongerFirst).
  std::vector<int> longest_first_;
  // What Assign places, biggest first: item k is the sequences
  // order_[item_begin_[k] .. item_begin_[k + 1]), all of one smallest size,
  // their estimates summed in item_estimate_[k * sizes + j]. One sequence per
  // item up to kAssignItems sequences; larger batches merge neighbours (of
  // near-identical estimates) so that there are about kAssignItems items.
  std::vector<int> item_begin_;
  std::vector<int> item_of_;  // per sequence
  std::vector<int> item_min_size_index_;
  std::vector<double> item_estimate_;
  std::vector<int64_t> capacity_no_recompute_;  // per size index
  std::vector<int64_t> capacity_full_recompute_;
  // Fixed cost of one micro-batch per size index, paid once by every group
  // that runs anything.
  std::vector<double> micro_batch_overhead_;
  // Mode settings: micro-batches per group when accumulation is fixed
  // (0 = variable), one recompute setting when pyramid is off (-1 = per
  // micro-batch).
  int fixed_micro_batches_ = 0;
  int uniform_checkpointed_layers_ = -1;
  // The mode being searched (the options', or a restriction of them).
  bool variable_accumulation_ = true;
  bool pyramid_recompute_ = true;
};


absl::Status PlanSearch::Prepare() {
  absl::StatusOr<double> bound =
      StepTimeLowerBound(cost_model_, sizes_, lengths_);
  if (!bound.ok()) return bound.status();
  lower_bound_ = *bound;

  const int n = static_cast<int>(lengths_.size());
  const int num_sizes = static_cast<int>(sizes_.size());
  constexpr double kExactIntegers = 9007199254740992.0;  // 2^53
  double sum_squares = 0;
  for (int64_t length : lengths_) {
    // Exact while below 2^53; past it the batch is flagged, so rounding
    // after that point does not matter.
    sum_squares += static_cast<double>(length) * static_cast<double>(length);
  }
  squares_exact_ = sum_squares < kExactIntegers;
  for (int sp : sizes_) {
    capacity_no_recompute_.push_back(cost_model_.MaxTokensPerRank(0, sp));
    capacity_full_recompute_.push_back(
        cost_model_.MaxTokensPerRank(cost_model_.model().num_layers, sp));
    MicroBatchShape token;
    token.sp_size = sp;
    token.AddSequence(1);
    micro_batch_overhead_.push_back(
        cost_model_.MicroBatch(token, 0).total_seconds);
  }
  // Classes numbered by increasing length: the distinct lengths are hashed
  // (batches repeat lengths), sorted, and looked up per sequence.
  absl::flat_hash_map<int64_t, int> class_by_length;
  for (int64_t length : lengths_) class_by_length.try_emplace(length, 0);
  std::vector<int64_t> distinct;
  distinct.reserve(class_by_length.size());
  for (const auto& [length, unused] : class_by_length) {
    distinct.push_back(length);
  }
  std::sort(distinct.begin(), distinct.end());
  for (size_t c = 0; c < distinct.size(); ++c) {
    class_by_length[distinct[c]] = static_cast<int>(c);
  }
  const int num_classes = static_cast<int>(distinct.size());
  class_of_.resize(n);
  class_count_.assign(num_classes, 0);
  class_min_size_index_.assign(num_classes, -1);  // -1: not priced yet
  estimate_.assign(static_cast<size_t>(num_classes) * num_sizes, kInfinity);
  // In index order, so that an error names the first sequence that fits
  // nowhere.
  for (int i = 0; i < n; ++i) {
    const int c = class_by_length.find(lengths_[i])->second;
    class_of_[i] = c;
    ++class_count_[c];
    if (class_min_size_index_[c] >= 0) continue;
    absl::StatusOr<int> min_sp =
        MinFeasibleSpSize(cost_model_, sizes_, i, lengths_[i]);
    if (!min_sp.ok()) return min_sp.status();
    class_min_size_index_[c] = static_cast<int>(
        std::lower_bound(sizes_.begin(), sizes_.end(), *min_sp) -
        sizes_.begin());
    for (int j = class_min_size_index_[c]; j < num_sizes; ++j) {
      MicroBatchShape alone;
      alone.sp_size = sizes_[j];
      alone.AddSequence(lengths_[i]);
      double& estimate = estimate_[static_cast<size_t>(c) * num_sizes + j];
      if (alone.tokens_per_rank > capacity_no_recompute_[j]) {
        // Runs in a micro-batch of its own, with recompute.
        const int k = cost_model_.MinCheckpointedLayers(alone).value_or(
            cost_model_.model().num_layers);
        estimate = cost_model_.MicroBatch(alone, k).total_seconds;
      } else {
        // Shares a micro-batch: count only what it adds over the
        // micro-batch's fixed costs (priced by a one-token sequence).
        // Plus its share of the fixed costs of the micro-batches its
        // group runs: they fill to the no-recompute capacity, so it takes
        // about its tokens' fraction of one.
        estimate = cost_model_.MicroBatch(alone, 0).total_seconds -
                   micro_batch_overhead_[j] +
                   micro_batch_overhead_[j] *
                       static_cast<double>(alone.tokens_per_rank) /
                       static_cast<double>(capacity_no_recompute_[j]);
      }
    }
  }
  // longest_first_: classes from the longest, each in index order (a
  // counting sort by class).
  std::vector<int> class_start(num_classes + 1, 0);
  for (int c = num_classes - 1; c >= 0; --c) {
    class_start[c] = class_start[c + 1] + static_cast<int>(class_count_[c]);
  }
  // class_start[c] now counts the sequences of classes >= c; turn it into
  // where class c begins when the longest class comes first.
  std::vector<int> next(num_classes);
  for (int c = 0; c < num_classes; ++c) next[c] = class_start[c + 1];
  longest_first_.resize(n);
  for (int i = 0; i < n; ++i) longest_first_[next[class_of_[i]]++] = i;
  auto members = [&](int c) {
    return absl::MakeConstSpan(longest_first_)
        .subspan(class_start[c + 1], class_count_[c]);
  };
  // order_: by estimate on the smallest size that fits, biggest first, ties
  // by index (a stable sort of the sequences, done over the classes).
  std::vector<double> key(num_classes);
  std::vector<int> classes(num_classes);
  for (int c = 0; c < num_classes; ++c) {
    key[c] = estimate_[static_cast<size_t>(c) * num_sizes +
                       class_min_size_index_[c]];
    classes[c] = c;
  }
  std::sort(classes.begin(), classes.end(), [&](int a, int b) {
    return key[a] != key[b] ? key[a] > key[b] : a < b;
  });
  order_.clear();
  order_.reserve(n);
  for (int first = 0; first < num_classes;) {
    int last = first + 1;
    while (last < num_classes && key[classes[last]] == key[classes[first]]) {
      ++last;
    }
    const size_t begin = order_.size();
    for (int k = first; k < last; ++k) {
      absl::Span<const int> sequences = members(classes[k]);
      order_.insert(order_.end(), sequences.begin(), sequences.end());
    }
    // Classes of equal estimates interleave by index.
    if (last - first > 1) std::sort(order_.begin() + begin, order_.end());
    first = last;
  }
  BuildAssignItems();
  ReportProgress(absl::StrCat("priced ", n, " sequences (", num_classes,
                              " distinct lengths) on ", num_sizes,
                              " SP sizes"));
  return absl::OkStatus();
}

void PlanSearch::BuildAssignItems() {
  const int n = static_cast<int>(order_.size());
  const int num_sizes = static_cast<int>(sizes_.size());
  auto key = [&](int sequence) {
    return Estimate(sequence, MinSizeIndex(sequence));
  };
  // An item grows while its estimate stays within `most` (0: one sequence
  // per item). Sequences are merged only with neighbours that need the same
  // smallest size; a sequence over `most` stays alone.
  double most = 0;
  if (n > kAssignItems) {
    double total = 0;
    for (int i : order_) total += key(i);
    most = total / kAssignItems;
  }
  item_begin_.clear();
  item_of_.assign(n, -1);
  item_min_size_index_.clear();
  item_estimate_.clear();
  for (int pos = 0; pos < n;) {
    const int first = order_[pos];
    const int min_size = MinSizeIndex(first);
    double sum = key(first);
    int end = pos + 1;
    while (end < n && MinSizeIndex(order_[end]) == min_size &&
           sum + key(order_[end]) <= most) {
      sum += key(order_[end]);
      ++end;
    }
    item_begin_.push_back(pos);
    item_min_size_index_.push_back(min_size);
    for (int p = pos; p < end; ++p) {
      item_of_[order_[p]] = static_cast<int>(item_min_size_index_.size()) - 1;
    }
    for (int j = 0; j < num_sizes; ++j) {
      double estimate = kInfinity;
      if (j >= min_size) {
        estimate = 0;
        for (int p = pos; p < end; ++p) estimate += Estimate(order_[p], j);
      }
      item_estimate_.push_back(estimate);
    }
    pos = end;
  }
  item_begin_.push_back(n);
}

std::vector<int> PlanSearch::CountsForTarget(double target,
                                             Rounding rounding,
                                             SizeChoice choice) const {
  const int num_sizes = static_cast<int>(sizes_.size());
  std::vector<double> work(num_sizes, 0);
  std::vector<bool> needs_size(num_sizes, false);
  // Per length class: every sequence of a class makes the same choice.
  for (size_t c = 0; c < class_count_.size(); ++c) {
    const double* estimate = &estimate_[c * num_sizes];
    // The smallest size that runs it within the target, else its fastest.
    int chosen = -1;
    double fastest = kInfinity;
    int fastest_index = class_min_size_index_[c];
    double least_gpu_seconds = kInfinity;
    for (int j = class_min_size_index_[c]; j < num_sizes; ++j) {
      const double seconds = estimate[j];
      if (seconds <= target) {
        if (choice == SizeChoice::kSmallest) {
          chosen = j;
          break;
        }
        const double gpu_seconds = seconds * sizes_[j];
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
    work[chosen] += static_cast<double>(class_count_[c]) * estimate[chosen];
    needs_size[class_min_size_index_[c]] = true;
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
    used += counts[j] * sizes_[j];
  }
  const int world = cost_model_.cluster().NumGpus();
  if (used > world) return {};
  // Spare GPUs go where they cut the most load per GPU.
  while (used < world) {
    int best = -1;
    double best_gain = -1;
    for (int j = 0; j < num_sizes; ++j) {
      if (sizes_[j] > world - used) continue;
      // Load removed from each group of this size per GPU added.
      const double gain =
          counts[j] == 0
              ? work[j] / sizes_[j]
              : work[j] / counts[j] / (counts[j] + 1) / sizes_[j];
      if (gain > best_gain) {
        best_gain = gain;
        best = j;
      }
    }
    ++counts[best];  // size 1 (index 0) always fits
    used += sizes_[best];
  }
  return counts;
}

std::optional<Assignment> PlanSearch::Assign(const std::vector<int>& counts,
                                             bool keep_sequences) const {
  const int num_sizes = static_cast<int>(sizes_.size());
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
  const int num_items = static_cast<int>(item_min_size_index_.size());
  std::vector<int> item_group(keep_sequences ? num_items : 0);
  for (int item = 0; item < num_items; ++item) {
    const double* estimate = &item_estimate_[static_cast<size_t>(item) * num_sizes];
    int best = -1;
    double best_finish = kInfinity;
    for (int j = item_min_size_index_[item]; j < num_sizes; ++j) {
      if (lightest[j].empty()) continue;
      const double load = lightest[j].top().first;
      const double finish = load + estimate[j] +
                            (load == 0 ? micro_batch_overhead_[j] : 0);
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
    for (int i : longest_first_) {
      assignment.group_sequences[item_group[item_of_[i]]].push_back(i);
    }
  }
  return assignment;
}

std::vector<MicroBatchPlan> PlanSearch::MicroBatches(
    const std::vector<int>& sequences, int sp_size,
    int64_t capacity_tokens_per_rank) const {
  std::vector<std::vector<int>> bins =
      PackMicroBatches(sequences, sp_size, capacity_tokens_per_rank);
  std::vector<MicroBatchPlan> micro_batches;
  micro_batches.reserve(bins.size());
  for (std::vector<int>& bin : bins) {
    MicroBatchPlan micro_batch;
    const MicroBatchShape shape = ShapeOfBin(bin, sp_size);
    micro_batch.checkpointed_layers = CheckpointedLayers(shape);
    const MicroBatchCost cost =
        cost_model_.MicroBatch(shape, micro_batch.checkpointed_layers);
    micro_batch.predicted_seconds = cost.total_seconds;
    micro_batch.predicted_peak_bytes = cost.peak_bytes;
    std::sort(bin.begin(), bin.end());
    micro_batch.sequence_indices = std::move(bin);
    micro_batches.push_back(std::move(micro_batch));
  }
  // Largest last: its backward hides the most of the gradient all-reduce.
  std::stable_sort(micro_batches.begin(), micro_batches.end(),
                   [](const MicroBatchPlan& a, const MicroBatchPlan& b) {
                     return a.predicted_seconds < b.predicted_seconds;
                   });
  return micro_batches;
}

MicroBatchShape PlanSearch::ShapeOfBin(const std::vector<int>& bin,
                                       int sp_size) const {
  MicroBatchShape shape;
  shape.sp_size = sp_size;
  for (int i : bin) shape.AddSequence(lengths_[i]);
  return shape;
}

int PlanSearch::CheckpointedLayers(const MicroBatchShape& shape) const {
  const int needed = cost_model_.MinCheckpointedLayers(shape).value_or(
      cost_model_.model().num_layers);
  return std::max(needed, uniform_checkpointed_layers_);
}

std::vector<std::vector<int>> PlanSearch::PackMicroBatches(
    const std::vector<int>& sequences, int sp_size,
    int64_t capacity_tokens_per_rank) const {
  const int j = static_cast<int>(
      std::lower_bound(sizes_.begin(), sizes_.end(), sp_size) - sizes_.begin());
  std::vector<std::vector<int>> bins;
  if (fixed_micro_batches_ == 0) {
    // As many micro-batches as fit without recompute. `sequences` is in
    // packing order already (LongerFirst).
    std::vector<int64_t> lengths_in_order;
    lengths_in_order.reserve(sequences.size());
    for (int i : sequences) lengths_in_order.push_back(lengths_[i]);
    bins = PackFirstFitInOrder(lengths_in_order, sp_size,
                               capacity_tokens_per_rank > 0
                                   ? capacity_tokens_per_rank
                                   : capacity_no_recompute_[j]);
    for (std::vector<int>& bin : bins) {
      for (int& position : bin) position = sequences[position];
    }
  } else {
    // Exactly the common count where the group has enough sequences: the
    // fewest that fit with full recompute, split until the count is reached.
    bins = PackFirstFitDecreasing(sequences, lengths_, sp_size,
                                  capacity_full_recompute_[j]);
    const size_t wanted = std::min<size_t>(fixed_micro_batches_, sequences.size());
    while (bins.size() < wanted) {
      int split = -1;
      int64_t most = -1;
      for (int b = 0; b < static_cast<int>(bins.size()); ++b) {
        if (bins[b].size() < 2) continue;
        int64_t tokens = 0;
        for (int i : bins[b]) tokens += TokensPerRank(lengths_[i], sp_size);
        if (tokens > most) {
          most = tokens;
          split = b;
        }
      }
      if (split < 0) break;
      std::vector<std::vector<int>> halves =
          BalanceIntoBins(bins[split], lengths_, sp_size, 2);
      bins[split] = std::move(halves[0]);
      bins.push_back(std::move(halves[1]));
    }
  }
  return bins;
}

void PlanSearch::SetModeSettings(const Assignment& assignment) {
  fixed_micro_batches_ = 0;
  uniform_checkpointed_layers_ = -1;
  if (!variable_accumulation_) {
    int most = 1;
    for (size_t g = 0; g < assignment.group_sequences.size(); ++g) {
      const int j = assignment.group_size_index[g];
      most = std::max<int>(
          most, PackFirstFitDecreasing(assignment.group_sequences[g], lengths_,
                                       sizes_[j], capacity_full_recompute_[j])
                    .size());
    }
    fixed_micro_batches_ = most;
  }
  if (!pyramid_recompute_) {
    int most = 0;
    for (size_t g = 0; g < assignment.group_sequences.size(); ++g) {
      for (const MicroBatchPlan& micro_batch :
           MicroBatches(assignment.group_sequences[g],
                        sizes_[assignment.group_size_index[g]])) {
        most = std::max(most, micro_batch.checkpointed_layers);
      }
    }
    uniform_checkpointed_layers_ = most;
  }
}

absl::StatusOr<Plan> PlanSearch::ToPlan(const Assignment& assignment,
                                        std::vector<int>* group_order) {
  std::vector<int> group_sizes;
  for (int j : assignment.group_size_index) group_sizes.push_back(sizes_[j]);
  absl::StatusOr<std::vector<int>> first_ranks =
      PlaceGroups(group_sizes, cost_model_.cluster());
  if (!first_ranks.ok()) return first_ranks.status();
  SetModeSettings(assignment);
  Plan plan;
  plan.strategy = options_.strategy_name;
  std::vector<int> by_rank(group_sizes.size());
  std::iota(by_rank.begin(), by_rank.end(), 0);
  std::sort(by_rank.begin(), by_rank.end(), [&](int a, int b) {
    return (*first_ranks)[a] < (*first_ranks)[b];
  });
  if (group_order != nullptr) *group_order = by_rank;
  for (int g : by_rank) {
    GroupPlan group;
    for (int r = 0; r < group_sizes[g]; ++r) {
      group.ranks.push_back((*first_ranks)[g] + r);
    }
    group.micro_batches =
        MicroBatches(assignment.group_sequences[g], group_sizes[g]);
    plan.groups.push_back(std::move(group));
  }
  PredictPlan(cost_model_, lengths_, plan);
  plan.lower_bound_seconds = lower_bound_;
  return plan;
}

std::optional<double> PlanSearch::PredictedStepSeconds(
    const Assignment& assignment) {
  // With inexact sums a plan's costs (PredictPlan, from sequences in index
  // order) may differ in the last bit from TimeGroup's (packing order).
  if (!squares_exact_) {
    absl::StatusOr<Plan> plan = ToPlan(assignment);
    if (!plan.ok()) return std::nullopt;
    return plan->predicted_step_seconds;
  }
  std::vector<int> group_sizes;
  for (int j : assignment.group_size_index) group_sizes.push_back(sizes_[j]);
  absl::StatusOr<std::vector<int>> first_ranks =
      PlaceGroups(group_sizes, cost_model_.cluster());
  if (!first_ranks.ok()) return std::nullopt;
  SetModeSettings(assignment);
  std::vector<int> by_rank(group_sizes.size());
  std::iota(by_rank.begin(), by_rank.end(), 0);
  std::sort(by_rank.begin(), by_rank.end(), [&](int a, int b) {
    return (*first_ranks)[a] < (*first_ranks)[b];
  });
  // As PredictPlan: the slowest group in rank order (first on ties) and
  // what of the all-reduce its last backward leaves exposed.
  double slowest_seconds = 0;
  double last_backward_of_slowest = 0;
  for (int g : by_rank) {
    const GroupTime time =
        TimeGroup(assignment.group_sequences[g], group_sizes[g]);
    if (time.seconds > slowest_seconds) {
      slowest_seconds = time.seconds;
      last_backward_of_slowest = time.last_backward_seconds;
    }
  }
  return slowest_seconds +
         std::max(0.0, cost_model_.GradientAllReduceSeconds() -
                           last_backward_of_slowest) +
         cost_model_.OptimizerStepSeconds();
}

PlanSearch::GroupTime PlanSearch::TimeGroup(const std::vector<int>& sequences,
                                            int sp_size) const {
  // What MicroBatches would plan, priced without building the plans:
  // summed in the same order (fastest first) and the last micro-batch's
  // backward priced from its sequences in index order, as a plan holds them.
  std::vector<std::vector<int>> bins = PackMicroBatches(sequences, sp_size);
  struct Priced {
    double seconds;
    int checkpointed_layers;
    size_t bin;
  };
  std::vector<Priced> priced;
  priced.reserve(bins.size());
  for (size_t b = 0; b < bins.size(); ++b) {
    const MicroBatchShape shape = ShapeOfBin(bins[b], sp_size);
    const int layers = CheckpointedLayers(shape);
    priced.push_back(
        {cost_model_.MicroBatch(shape, layers).total_seconds, layers, b});
  }
  std::stable_sort(priced.begin(), priced.end(),
                   [](const Priced& a, const Priced& b) {
                     return a.seconds < b.seconds;
                   });
  GroupTime time;
  for (const Priced& micro_batch : priced) time.seconds += micro_batch.seconds;
  if (!priced.empty()) {
    std::vector<int>& last = bins[priced.back().bin];
    std::sort(last.begin(), last.end());
    time.last_backward_seconds =
        cost_model_
            .MicroBatch(ShapeOfBin(last, sp_size),
                        priced.back().checkpointed_layers)
            .backward_seconds;
  }
  return time;
}

Assignment PlanSearch::Refine(Assignment assignment) const {
  const int num_sizes = static_cast<int>(sizes_.size());
  const int num_groups = static_cast<int>(assignment.group_sequences.size());
  if (num_groups < 2) return assignment;
  const double all_reduce = cost_model_.GradientAllReduceSeconds();
  std::vector<GroupTime> times(num_groups);
  for (int g = 0; g < num_groups; ++g) {
    times[g] = TimeGroup(assignment.group_sequences[g],
                         sizes_[assignment.group_size_index[g]]);
  }
  // The step as PredictPlan prices it: the slowest group (first on ties)
  // plus what of the all-reduce its last backward does not hide.
  auto step_seconds = [&](const GroupTime& slowest) {
    return slowest.seconds +
           std::max(0.0, all_reduce - slowest.last_backward_seconds);
  };
  // Small batches: every sequence of the slowest group to every other group,
  // and swaps of it with every sequence there. Larger ones: a sample of
  // moves to a few targets.
  const bool small =
      static_cast<int64_t>(lengths_.size()) <= kThoroughRefineSequences;
  const int rounds = small ? kThoroughRefineRounds
                           : std::clamp(2 * num_groups, kRefinementRounds, 256);
  int64_t sequences_timed = 0;
  for (int round = 0; round < rounds && sequences_timed < kRefineSequenceBudget;
       ++round) {
    const bool thorough = small && ThoroughBudgetLeft();
    const int64_t timed_before = sequences_timed;
    // The three slowest groups: the step after a move between two groups is
    // decided by them and the two changed groups.
    std::vector<int> top;
    for (int g = 0; g < num_groups; ++g) {
      top.push_back(g);
      std::sort(top.begin(), top.end(), [&](int x, int y) {
        return times[x].seconds != times[y].seconds
                   ? times[x].seconds > times[y].seconds
                   : x < y;
      });
      if (top.size() > 3) top.pop_back();
    }
    const int slowest = top[0];
    const int source_size = assignment.group_size_index[slowest];
    const double current = step_seconds(times[slowest]);
    std::vector<int> targets;
    if (thorough) {
      for (int g = 0; g < num_groups; ++g) {
        if (g != slowest) targets.push_back(g);
      }
    } else {
      // The least loaded group of each size, and the group whose last
      // backward hides the most of the all-reduce.
      targets.assign(num_sizes, -1);
      int hiding = -1;
      for (int g = 0; g < num_groups; ++g) {
        if (g == slowest) continue;
        int& best = targets[assignment.group_size_index[g]];
        if (best < 0 || times[g].seconds < times[best].seconds) best = g;
        if (hiding < 0 || times[g].last_backward_seconds >
                              times[hiding].last_backward_seconds) {
          hiding = g;
        }
      }
      if (hiding >= 0 &&
          std::find(targets.begin(), targets.end(), hiding) == targets.end()) {
        targets.push_back(hiding);
      }
    }
    std::vector<int>& source = assignment.group_sequences[slowest];
    // Candidate sequences (positions in `source`, which is longest first):
    // all of them, or the biggest ones and then a spread of the rest.
    std::vector<int> tried;
    if (thorough) {
      for (int p = 0; p < static_cast<int>(source.size()); ++p) {
        tried.push_back(p);
      }
    } else {
      const int half = kMovesTriedPerRound / 2;
      for (int p = 0; p < static_cast<int>(source.size()) && p < half; ++p) {
        tried.push_back(p);
      }
      const int rest = static_cast<int>(source.size()) - half;
      for (int q = 0; rest > 0 && q < half; ++q) {
        const int p = half + q * rest / half;
        if (std::find(tried.begin(), tried.end(), p) == tried.end()) {
          tried.push_back(p);
        }
      }
    }
    double best_step = current * (1 - 1e-9);
    int best_position = -1;
    int best_target = -1;
    int best_swap = -1;  // position in the target's list; -1: a move
    GroupTime best_source_time;
    GroupTime best_target_time;
    // Keeps the move if the step it leaves is the least so far.
    auto consider_move = [&](int position, int target, int swap,
                             const GroupTime& source_time,
                             const GroupTime& target_time) {
      // The new slowest among the changed pair and the other leaders.
      GroupTime new_slowest = source_time;
      int new_slowest_group = slowest;
      auto consider = [&](int g, const GroupTime& time) {
        if (time.seconds > new_slowest.seconds ||
            (time.seconds == new_slowest.seconds && g < new_slowest_group)) {
          new_slowest = time;
          new_slowest_group = g;
        }
      };
      consider(target, target_time);
      for (int g : top) {
        if (g != slowest && g != target) consider(g, times[g]);
      }
      const double step = step_seconds(new_slowest);
      if (step >= best_step) return false;
      best_step = step;
      best_position = position;
      best_target = target;
      best_swap = swap;
      best_source_time = source_time;
      best_target_time = target_time;
      return true;
    };
    for (int position : tried) {
      const int sequence = source[position];
      std::vector<int> without = source;
      without.erase(without.begin() + position);
      sequences_timed += static_cast<int64_t>(without.size());
      const GroupTime source_time =
          TimeGroup(without, sizes_[source_size]);
      for (int target : targets) {
        if (target < 0) continue;
        const int j = assignment.group_size_index[target];
        const bool fits_target = j >= MinSizeIndex(sequence);
        const std::vector<int>& target_sequences =
            assignment.group_sequences[target];
        if (fits_target) {
          std::vector<int> with = target_sequences;
          InsertInOrder(with, sequence);
          sequences_timed += static_cast<int64_t>(with.size());
          consider_move(position, target, -1, source_time,
                        TimeGroup(with, sizes_[j]));
        }
        if (!thorough || !fits_target) continue;
        // Swaps: the target's sequence `other` comes back in exchange.
        for (int q = 0; q < static_cast<int>(target_sequences.size()); ++q) {
          const int other = target_sequences[q];
          if (lengths_[other] == lengths_[sequence] ||
              source_size < MinSizeIndex(other)) {
            continue;
          }
          std::vector<int> source_with = without;
          InsertInOrder(source_with, other);
          std::vector<int> target_with = target_sequences;
          target_with.erase(target_with.begin() + q);
          InsertInOrder(target_with, sequence);
          sequences_timed += static_cast<int64_t>(source_with.size() +
                                                  target_with.size());
          consider_move(position, target, q,
                        TimeGroup(source_with, sizes_[source_size]),
                        TimeGroup(target_with, sizes_[j]));
        }
      }
    }
    if (thorough) thorough_sequences_timed_ += sequences_timed - timed_before;
    if (best_target < 0 && thorough) {
      // No single move or swap helps: split the sequences of the slowest
      // group and one other anew, every way (for pairs of few sequences),
      // the subsets keeping the longest-first order.
      uint32_t best_mask = 0;
      for (int target : targets) {
        const std::vector<int>& target_sequences =
            assignment.group_sequences[target];
        std::vector<int> both = source;
        both.insert(both.end(), target_sequences.begin(),
                    target_sequences.end());
        std::sort(both.begin(), both.end(),
                  [&](int a, int b) { return LongerFirst(a, b); });
        const int m = static_cast<int>(both.size());
        if (m > kMaxRepartitionSequences) continue;
        const int j = assignment.group_size_index[target];
        const int64_t cost = (int64_t{1} << m) * m;
        if (thorough_sequences_timed_ + cost > kThoroughSequenceBudget) {
          continue;
        }
        thorough_sequences_timed_ += cost;
        for (uint32_t mask = 0; mask < (uint32_t{1} << m); ++mask) {
          std::vector<int> to_source;
          std::vector<int> to_target;
          bool fits = true;
          for (int k = 0; k < m && fits; ++k) {
            if (mask >> k & 1) {
              fits = MinSizeIndex(both[k]) <= source_size;
              to_source.push_back(both[k]);
            } else {
              fits = MinSizeIndex(both[k]) <= j;
              to_target.push_back(both[k]);
            }
          }
          if (!fits) continue;
          if (consider_move(-1, target, -1,
                            TimeGroup(to_source, sizes_[source_size]),
                            TimeGroup(to_target, sizes_[j]))) {
            best_mask = mask;
          }
        }
      }
      if (best_target >= 0) {
        std::vector<int>& target = assignment.group_sequences[best_target];
        std::vector<int> both = source;
        both.insert(both.end(), target.begin(), target.end());
        std::sort(both.begin(), both.end(),
                  [&](int a, int b) { return LongerFirst(a, b); });
        source.clear();
        target.clear();
        for (int k = 0; k < static_cast<int>(both.size()); ++k) {
          (best_mask >> k & 1 ? source : target).push_back(both[k]);
        }
        times[slowest] = best_source_time;
        times[best_target] = best_target_time;
        continue;
      }
    }
    if (best_target < 0) break;
    const int sequence = source[best_position];
    source.erase(source.begin() + best_position);
    std::vector<int>& target = assignment.group_sequences[best_target];
    if (best_swap >= 0) {
      const int other = target[best_swap];
      target.erase(target.begin() + best_swap);
      InsertInOrder(source, other);
    }
    InsertInOrder(target, sequence);
    times[slowest] = best_source_time;
    times[best_target] = best_target_time;
  }
  return assignment;
}

void PlanSearch::ChangeGroupSizes(Assignment& assignment, double& seconds) {
  int refinements = 0;
  bool improved = true;
  while (improved && refinements < kGroupSizeChanges && ThoroughBudgetLeft()) {
    improved = false;
    std::vector<Assignment> neighbours;
    const int num_groups = static_cast<int>(assignment.group_size_index.size());
    // Splits: the group's sequences all to the first half, refinement
    // spreads them.
    for (int g = 0; g < num_groups; ++g) {
      const int j = assignment.group_size_index[g];
      if (j == 0 || sizes_[j - 1] * 2 != sizes_[j]) continue;
      const std::vector<int>& sequences = assignment.group_sequences[g];
      if (std::any_of(sequences.begin(), sequences.end(),
                      [&](int i) { return MinSizeIndex(i) > j - 1; })) {
        continue;
      }
      Assignment split = assignment;
      split.group_size_index[g] = j - 1;
      split.group_size_index.push_back(j - 1);
      split.group_sequences.emplace_back();
      neighbours.push_back(std::move(split));
    }
    // Merges of the slowest group with each other of its size.
    std::vector<GroupTime> times(num_groups);
    int slowest = 0;
    for (int g = 0; g < num_groups; ++g) {
      times[g] = TimeGroup(assignment.group_sequences[g],
                           sizes_[assignment.group_size_index[g]]);
      if (times[g].seconds > times[slowest].seconds) slowest = g;
    }
    const int j = assignment.group_size_index[slowest];
    if (j + 1 < static_cast<int>(sizes_.size()) &&
        sizes_[j + 1] == 2 * sizes_[j]) {
      for (int g = 0; g < num_groups; ++g) {
        if (g == slowest || assignment.group_size_index[g] != j) continue;
        Assignment merged = assignment;
        std::vector<int>& into = merged.group_sequences[slowest];
        for (int i : merged.group_sequences[g]) InsertInOrder(into, i);
        merged.group_size_index[slowest] = j + 1;
        merged.group_size_index.erase(merged.group_size_index.begin() + g);
        merged.group_sequences.erase(merged.group_sequences.begin() + g);
        neighbours.push_back(std::move(merged));
      }
    }
    std::optional<Assignment> best;
    double best_seconds = seconds * (1 - 1e-9);
    for (Assignment& neighbour : neighbours) {
      if (refinements >= kGroupSizeChanges || !ThoroughBudgetLeft()) break;
      std::vector<int> group_sizes;
      for (int k : neighbour.group_size_index) group_sizes.push_back(sizes_[k]);
      if (!PlaceGroups(group_sizes, cost_model_.cluster()).ok()) continue;
      ++refinements;
      SetModeSettings(neighbour);
      Assignment refined = Refine(std::move(neighbour));
      const std::optional<double> refined_seconds =
          PredictedStepSeconds(refined);
      if (refined_seconds && *refined_seconds < best_seconds) {
        best_seconds = *refined_seconds;
        best = std::move(refined);
      }
    }
    if (best) {
      assignment = *std::move(best);
      seconds = best_seconds;
      improved = true;
    }
  }
  // Leaves the mode settings as for the kept assignment.
  SetModeSettings(assignment);
}

bool PlanSearch::StaticPlanMayBeat(double seconds) const {
  absl::StatusOr<StaticConfig> config =
      ChooseStaticConfig(cost_model_, options_.static_options, lengths_);
  // Without a static configuration both static plans fail too.
  if (!config.ok()) return false;
  const int static_sizes[] = {config->sp_size};
  absl::StatusOr<double> bound =
      StepTimeLowerBound(cost_model_, static_sizes, lengths_);
  if (!bound.ok()) return true;
  // The margin keeps rounding between the bound's and the plans' sums from
  // ever skipping a plan that would have won.
  return *bound * (1 - 1e-9) < seconds;
}

void PlanSearch::HideAllReduce(Plan& plan, const Assignment& assignment,
                               const std::vector<int>& group_order) const {
  if (fixed_micro_batches_ != 0 || uniform_checkpointed_layers_ >= 0) return;
  if (plan.exposed_allreduce_seconds <= 0) return;
  // ToPlan laid groups out by first rank; `group_order` maps them back.
  const std::vector<int>& group_of_plan = group_order;
  const int layers = cost_model_.model().num_layers;
  for (int round = 0; round < 4 && plan.exposed_allreduce_seconds > 0;
       ++round) {
    size_t slowest = 0;
    for (size_t p = 1; p < plan.groups.size(); ++p) {
      if (plan.groups[p].predicted_seconds >
          plan.groups[slowest].predicted_seconds) {
        slowest = p;
      }
    }
    if (group_of_plan[slowest] < 0) return;
    const std::vector<int>& sequences =
        assignment.group_sequences[group_of_plan[slowest]];
    Plan best = plan;
    for (int k : {layers / 4, layers / 2, (3 * layers) / 4, layers}) {
      Plan trial = plan;
      trial.groups[slowest].micro_batches =
          MicroBatches(sequences, plan.groups[slowest].sp_size(),
                       cost_model_.MaxTokensPerRank(
                           k, plan.groups[slowest].sp_size()));
      PredictPlan(cost_model_, lengths_, trial);
      if (trial.predicted_step_seconds < best.predicted_step_seconds) {
        best = std::move(trial);
      }
    }
    if (best.predicted_step_seconds >= plan.predicted_step_seconds) return;
    plan = std::move(best);
  }
}

absl::StatusOr<Plan> PlanSearch::Run() {
  if (absl::Status status = Prepare(); !status.ok()) return status;
  variable_accumulation_ = options_.variable_accumulation;
  pyramid_recompute_ = options_.pyramid_recompute;
  absl::StatusOr<Plan> best = Search();
  if (!best.ok()) return best;
  ReportProgress(absl::StrCat("searched: predicted step ",
                              best->predicted_step_seconds, " s"));
  // The static ways of training are legal plans too: never return worse.
  // (They keep one accumulation count only up to a remainder, so not when
  // accumulation must be fixed.)
  if (options_.variable_accumulation &&
      StaticPlanMayBeat(best->predicted_step_seconds)) {
    for (auto* plan_static : {&PlanBucket, &PlanPacked}) {
      absl::StatusOr<Plan> plan =
          (*plan_static)(cost_model_, lengths_, options_.static_options);
      if (plan.ok() &&
          plan->predicted_step_seconds < best->predicted_step_seconds) {
        plan->strategy = options_.strategy_name;
        plan->lower_bound_seconds = lower_bound_;
        best = *std::move(plan);
      }
    }
  }
  if (best->exposed_allreduce_seconds <= 0) return best;
  // With part of the all-reduce exposed, fewer and larger micro-batches (a
  // common accumulation count, one recompute setting) can hide more of it
  // than they cost; those plans are legal here too, so search them as well.
  for (const auto& [variable, pyramid] :
       {std::pair{false, true}, std::pair{true, false},
        std::pair{false, false}}) {
    // Only restrictions of what the options allow.
    if ((variable && !options_.variable_accumulation) ||
        (pyramid && !options_.pyramid_recompute) ||
        (variable == options_.variable_accumulation &&
         pyramid == options_.pyramid_recompute)) {
      continue;
    }
    variable_accumulation_ = variable;
    pyramid_recompute_ = pyramid;
    ReportProgress(absl::StrCat(
        "searching again with ",
        variable ? "variable" : "one common", " accumulation and ",
        pyramid ? "pyramid" : "uniform", " recompute, to hide the all-reduce"));
    absl::StatusOr<Plan> plan = Search();
    if (plan.ok() &&
        plan->predicted_step_seconds < best->predicted_step_seconds) {
      best = std::move(plan);
    }
  }
  return best;
}

const std::vector<std::vector<int>>& PlanSearch::RankedLayouts() {
  if (!ranked_layouts_.empty()) return ranked_layouts_;
  const int world = cost_model_.cluster().NumGpus();
  const int num_sizes = static_cast<int>(sizes_.size());

  std::vector<std::vector<int>> candidates;
  for (double factor : kTargetFactors) {
    for (Rounding rounding :
         {Rounding::kDown, Rounding::kNearest, Rounding::kUp}) {
      std::vector<int> counts =
          CountsForTarget(lower_bound_ * factor, rounding, SizeChoice::kSmallest);
      if (!counts.empty()) candidates.push_back(std::move(counts));
    }
    // Sizes by least GPU-seconds too, rounded to the nearest, where the
    // extra starting points (each an Assign of the whole batch) are cheap.
    if (static_cast<int64_t>(lengths_.size()) <= kLeastGpuSecondsSequences) {
      std::vector<int> counts = CountsForTarget(
          lower_bound_ * factor, Rounding::kNearest, SizeChoice::kLeastGpuSeconds);
      if (!counts.empty()) candidates.push_back(std::move(counts));
    }
  }
  // Homogeneous layouts (every group the same size) keep the static ways of
  // training inside the search space.
  const int needed = *std::max_element(class_min_size_index_.begin(),
                                       class_min_size_index_.end());
  for (int j = needed; j < num_sizes; ++j) {
    std::vector<int> counts(num_sizes, 0);
    counts[j] = world / sizes_[j];
    if (counts[j] * sizes_[j] == world) candidates.push_back(std::move(counts));
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()),
                   candidates.end());

  // Hill-climb over layouts from every starting point: merge groups of one
  // size into a larger one or split one, judged by the estimated makespan of
  // the greedy assignment; the budget shrinks as batches grow.
  const int64_t budget = std::clamp<int64_t>(
      int64_t{1'500'000} /
          (static_cast<int64_t>(lengths_.size()) * num_sizes + 1),
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
      group_sizes.insert(group_sizes.end(), counts[j], sizes_[j]);
    }
    if (PlaceGroups(group_sizes, cost_model_.cluster()).ok()) {
      std::optional<Assignment> assignment =
          Assign(counts, /*keep_sequences=*/false);
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
          if (sizes_[b] % sizes_[a] != 0) continue;
          const int ratio = sizes_[b] / sizes_[a];
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
  ReportProgress(absl::StrCat("ranked ", estimated.size(),
                              " layouts of SP groups by estimate"));
  // Price the most promising layouts exactly, and the homogeneous ones.
  std::vector<std::pair<double, std::vector<int>>> ranked;
  for (const auto& [counts, seconds] : estimated) {
    if (seconds < kInfinity) ranked.push_back({seconds, counts});
  }
  std::sort(ranked.begin(), ranked.end());
  // The estimates ignore packing, so more of them are priced exactly where
  // pricing is cheap (4 to 16 layouts, fewer as batches grow).
  const size_t exactly_priced = static_cast<size_t>(std::clamp<int64_t>(
      kExactlyPricedSequences / (static_cast<int64_t>(lengths_.size()) + 1),
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

  for (auto& [unused, counts] : ranked) {
    ranked_layouts_.push_back(std::move(counts));
  }
  return ranked_layouts_;
}

absl::StatusOr<Plan> PlanSearch::Search() {
  // Candidates are priced without making their plans; only the winner's
  // plan is made, once.
  // (seconds, layout rank, assignment) of every layout that could be placed.
  struct Priced {
    double seconds;
    size_t rank;
    Assignment assignment;
  };
  std::vector<Priced> priced;
  const std::vector<std::vector<int>>& layouts = RankedLayouts();
  for (size_t rank = 0; rank < layouts.size(); ++rank) {
    std::optional<Assignment> assignment = Assign(layouts[rank]);
    if (!assignment) continue;
    const std::optional<double> seconds = PredictedStepSeconds(*assignment);
    if (!seconds) continue;
    priced.push_back({*seconds, rank, *std::move(assignment)});
  }
  if (priced.empty()) {
    return absl::InternalError(
        "no candidate layout could be placed on the cluster");
  }
  std::stable_sort(priced.begin(), priced.end(),
                   [](const Priced& a, const Priced& b) {
                     return a.seconds < b.seconds;
                   });
  ReportProgress(absl::StrCat("priced ", layouts.size(),
                              " layouts exactly; refining the best"));
  // Small batches refine the best few layouts (a worse start may refine to
  // a better plan); larger ones the best.
  const size_t starts =
      static_cast<int64_t>(lengths_.size()) <= kThoroughRefineSequences
          ? std::min(priced.size(), kThoroughRefineStarts)
          : 1;
  std::optional<Assignment> best_assignment = priced[0].assignment;
  double best_seconds = priced[0].seconds;
  for (size_t start = 0; start < starts; ++start) {
    if (start > 0 && !ThoroughBudgetLeft()) break;
    SetModeSettings(priced[start].assignment);
    Assignment refined = Refine(priced[start].assignment);
    const std::optional<double> refined_seconds =
        PredictedStepSeconds(refined);
    if (refined_seconds && *refined_seconds < best_seconds) {
      best_seconds = *refined_seconds;
      best_assignment = std::move(refined);
    }
  }
  if (static_cast<int64_t>(lengths_.size()) <= kThoroughRefineSequences) {
    ChangeGroupSizes(*best_assignment, best_seconds);
  }
  std::vector<int> group_order;
  absl::StatusOr<Plan> best_plan = ToPlan(*best_assignment, &group_order);
  if (!best_plan.ok()) return best_plan.status();
  // Fewer, larger micro-batches for the slowest groups only when there is
  // all-reduce to hide.
  if (best_plan->exposed_allreduce_seconds > 0) {
    Plan plan = *best_plan;
    HideAllReduce(plan, *best_assignment, group_order);
    if (plan.predicted_step_seconds < best_plan->predicted_step_seconds) {
      best_plan = std::move(plan);
    }
  }
  return best_plan;
}

}  // namespace

absl::StatusOr<Plan> Planner::PlanBatch(
    absl::Span<const int64_t> lengths_tokens) const {
  if (absl::Status status = ValidateBatch(lengths_tokens); !status.ok()) {
    return status;
  }
  absl::StatusOr<std::vector<int>> sizes =
      LegalSpSizes(cost_model_, options_.sp_sizes);
  if (!sizes.ok()) return sizes.status();
  PlanSearch search(cost_model_, options_, lengths_tokens, *std::move(sizes));
  return search.Run();
}

}  // namespace dcp
