#include "planner/search/batch_table.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "planner/plan/batch_check.h"
#include "planner/search/lower_bound.h"

namespace dcp {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

}  // namespace

absl::StatusOr<BatchTable> BatchTable::Build(const CostModel& cost_model,
                                             absl::Span<const int64_t> lengths,
                                             std::vector<int> sizes) {
  BatchTable table(lengths, std::move(sizes));
  if (absl::Status status = table.Fill(cost_model); !status.ok()) {
    return status;
  }
  return table;
}

absl::Status BatchTable::Fill(const CostModel& cost_model) {
  absl::StatusOr<double> bound =
      StepTimeLowerBound(cost_model, sizes_, lengths_);
  if (!bound.ok()) return bound.status();
  lower_bound_ = *bound;

  constexpr double kExactIntegers = 9007199254740992.0;  // 2^53
  double sum_squares = 0;
  for (int64_t length : lengths_) {
    // Exact while below 2^53; past it the batch is flagged, so rounding
    // after that point does not matter.
    sum_squares += static_cast<double>(length) * static_cast<double>(length);
  }
  squares_exact_ = sum_squares < kExactIntegers;
  for (int sp : sizes_) {
    capacity_no_recompute_.push_back(cost_model.MaxTokensPerRank(0, sp));
    capacity_full_recompute_.push_back(
        cost_model.MaxTokensPerRank(cost_model.model().num_layers, sp));
    MicroBatchShape token;
    token.sp_size = sp;
    token.AddSequence(1);
    micro_batch_overhead_.push_back(
        cost_model.MicroBatch(token, 0).total_seconds);
  }
  if (absl::Status status = PriceClasses(cost_model); !status.ok()) {
    return status;
  }
  OrderSequences();
  BuildAssignItems();
  return absl::OkStatus();
}

absl::Status BatchTable::PriceClasses(const CostModel& cost_model) {
  const int n = static_cast<int>(lengths_.size());
  const int num_sizes = static_cast<int>(sizes_.size());
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
        MinFeasibleSpSize(cost_model, sizes_, i, lengths_[i]);
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
        const int k = cost_model.MinCheckpointedLayers(alone).value_or(
            cost_model.model().num_layers);
        estimate = cost_model.MicroBatch(alone, k).total_seconds;
      } else {
        // Shares a micro-batch: count only what it adds over the
        // micro-batch's fixed costs (priced by a one-token sequence).
        // Plus its share of the fixed costs of the micro-batches its
        // group runs: they fill to the no-recompute capacity, so it takes
        // about its tokens' fraction of one.
        estimate = cost_model.MicroBatch(alone, 0).total_seconds -
                   micro_batch_overhead_[j] +
                   micro_batch_overhead_[j] *
                       static_cast<double>(alone.tokens_per_rank) /
                       static_cast<double>(capacity_no_recompute_[j]);
      }
    }
  }
  return absl::OkStatus();
}

void BatchTable::OrderSequences() {
  const int n = static_cast<int>(lengths_.size());
  const int num_sizes = static_cast<int>(sizes_.size());
  const int num_classes = static_cast<int>(class_count_.size());
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
}

void BatchTable::BuildAssignItems() {
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

}  // namespace dcp
