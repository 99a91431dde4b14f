// The batch as the search sees it before it tries any layout.

#ifndef DCP_PLANNER_SEARCH_BATCH_TABLE_H_
#define DCP_PLANNER_SEARCH_BATCH_TABLE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cost_model/cost_model.h"

namespace dcp {

/// One batch priced once for the whole search: its lengths grouped into
/// classes (one per distinct length), each class's smallest feasible SP size
/// and additive time estimate on every size, the sequences in the orders the
/// search walks them, the items the greedy assignment places, and per size
/// the micro-batch capacities and fixed cost. Sequences of one length are
/// priced once, so a batch of repeated lengths costs little to build.
///
/// Built by Build, then read-only (thread-compatible). `lengths` must
/// outlive the table.
class BatchTable {
 public:
  /// Sequences up to which Assign places every sequence on its own; larger
  /// batches are placed in about this many items of neighbouring sequences
  /// (of near-identical estimates and one smallest size).
  static constexpr int kAssignItems = 1 << 16;

  /// Prices `lengths` on the SP sizes `sizes` (ascending). Errors: the
  /// step-time lower bound's, or MinFeasibleSpSize's naming the first
  /// sequence (by index) that fits on no size.
  static absl::StatusOr<BatchTable> Build(const CostModel& cost_model,
                                          absl::Span<const int64_t> lengths,
                                          std::vector<int> sizes);

  int64_t num_sequences() const {
    return static_cast<int64_t>(lengths_.size());
  }
  /// The step-time lower bound of the batch (StepTimeLowerBound).
  double lower_bound() const { return lower_bound_; }
  /// Whether every sum of squared lengths of the batch is exact in a double
  /// (the whole batch's sum is below 2^53), so that a micro-batch's shape,
  /// and so its cost, does not depend on the order its sequences are added.
  bool squares_exact() const { return squares_exact_; }

  int num_classes() const { return static_cast<int>(class_count_.size()); }
  /// Sequences of class `c`.
  int64_t class_count(int c) const { return class_count_[c]; }
  /// The smallest size index that holds class `c`.
  int class_min_size_index(int c) const { return class_min_size_index_[c]; }
  /// The largest smallest size index over the classes: the size the longest
  /// sequence needs.
  int max_min_size_index() const {
    return *std::max_element(class_min_size_index_.begin(),
                             class_min_size_index_.end());
  }
  /// Seconds a sequence of class `c` adds to a group of each size index
  /// (num sizes entries; infinity where it does not fit).
  const double* class_estimates(int c) const {
    return &estimate_[static_cast<size_t>(c) * sizes_.size()];
  }

  /// The smallest size index that holds `sequence`.
  int MinSizeIndex(int sequence) const {
    return class_min_size_index_[class_of_[sequence]];
  }
  /// Seconds `sequence` adds to a group of size index `size_index`.
  double Estimate(int sequence, int size_index) const {
    return class_estimates(class_of_[sequence])[size_index];
  }
  /// The order packing wants (longest first, ties by index); groups keep
  /// their sequence lists in it so that packing need not sort them.
  bool LongerFirst(int a, int b) const {
    return lengths_[a] != lengths_[b] ? lengths_[a] > lengths_[b] : a < b;
  }
  /// Inserts `sequence` into `sequences` (in LongerFirst order) in order.
  void InsertInOrder(std::vector<int>& sequences, int sequence) const {
    sequences.insert(
        std::lower_bound(sequences.begin(), sequences.end(), sequence,
                         [&](int a, int b) { return LongerFirst(a, b); }),
        sequence);
  }
  /// Every sequence, in LongerFirst order.
  const std::vector<int>& longest_first() const { return longest_first_; }

  /// What Assign places, biggest first (see kAssignItems).
  int num_items() const {
    return static_cast<int>(item_min_size_index_.size());
  }
  /// The item `sequence` belongs to.
  int item_of(int sequence) const { return item_of_[sequence]; }
  /// The smallest size index of an item's sequences (one for all of them).
  int item_min_size_index(int item) const {
    return item_min_size_index_[item];
  }
  /// The item's sequences' estimates summed, per size index.
  const double* item_estimates(int item) const {
    return &item_estimate_[static_cast<size_t>(item) * sizes_.size()];
  }

  /// Tokens per rank a micro-batch of size index `j` holds without
  /// recompute, and with every layer recomputed.
  int64_t capacity_no_recompute(int j) const {
    return capacity_no_recompute_[j];
  }
  int64_t capacity_full_recompute(int j) const {
    return capacity_full_recompute_[j];
  }
  /// Fixed cost of one micro-batch on size index `j`, paid once by every
  /// group that runs anything.
  double micro_batch_overhead(int j) const { return micro_batch_overhead_[j]; }

 private:
  BatchTable(absl::Span<const int64_t> lengths, std::vector<int> sizes)
      : lengths_(lengths), sizes_(std::move(sizes)) {}
  absl::Status Fill(const CostModel& cost_model);
  // Classes of the lengths, their smallest sizes and estimates.
  absl::Status PriceClasses(const CostModel& cost_model);
  // longest_first_ and order_ from the classes.
  void OrderSequences();
  // Groups consecutive sequences of order_ into the items Assign places.
  void BuildAssignItems();

  absl::Span<const int64_t> lengths_;
  std::vector<int> sizes_;
  double lower_bound_ = 0;
  bool squares_exact_ = false;
  std::vector<int> class_of_;         // per sequence: its length's class
  std::vector<int64_t> class_count_;  // per class: how many sequences
  std::vector<int> class_min_size_index_;
  // estimate_[c * sizes + j]: seconds a sequence of class c adds to a group
  // of size j (infinity where it does not fit).
  std::vector<double> estimate_;
  // Sequences by estimate on the smallest size that fits, biggest first,
  // ties by index.
  std::vector<int> order_;
  std::vector<int> longest_first_;
  // Item k is the sequences order_[item_begin_[k] .. item_begin_[k + 1]),
  // all of one smallest size, their estimates summed in
  // item_estimate_[k * sizes + j].
  std::vector<int> item_begin_;
  std::vector<int> item_of_;  // per sequence
  std::vector<int> item_min_size_index_;
  std::vector<double> item_estimate_;
  std::vector<int64_t> capacity_no_recompute_;  // per size index
  std::vector<int64_t> capacity_full_recompute_;
  std::vector<double> micro_batch_overhead_;
};

}  // namespace dcp

#endif  // DCP_PLANNER_SEARCH_BATCH_TABLE_H_
