#include "planner/search/packing.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>
#include <utility>

namespace dcp {

std::vector<int> LongestFirst(absl::Span<const int> sequence_indices,
                              absl::Span<const int64_t> lengths_tokens) {
  auto longer_first = [&](int a, int b) {
    if (lengths_tokens[a] != lengths_tokens[b]) {
      return lengths_tokens[a] > lengths_tokens[b];
    }
    return a < b;
  };
  std::vector<int> order(sequence_indices.begin(), sequence_indices.end());
  // Callers that keep their lists in this order pay only the check.
  if (std::is_sorted(order.begin(), order.end(), longer_first)) return order;
  // Sorting (length, index) pairs beats comparing through the lengths.
  std::vector<std::pair<int64_t, int>> keyed;
  keyed.reserve(order.size());
  for (int index : order) keyed.push_back({-lengths_tokens[index], index});
  std::sort(keyed.begin(), keyed.end());
  for (size_t k = 0; k < keyed.size(); ++k) order[k] = keyed[k].second;
  return order;
}

std::vector<int> LongestFirst(absl::Span<const int64_t> lengths_tokens) {
  std::vector<int> all(lengths_tokens.size());
  std::iota(all.begin(), all.end(), 0);
  return LongestFirst(all, lengths_tokens);
}

std::vector<std::vector<int>> PackFirstFitDecreasing(
    absl::Span<const int> sequence_indices,
    absl::Span<const int64_t> lengths_tokens, int sp_size,
    int64_t capacity_tokens_per_rank) {
  const std::vector<int> order = LongestFirst(sequence_indices, lengths_tokens);
  std::vector<int64_t> lengths_in_order;
  lengths_in_order.reserve(order.size());
  for (int index : order) lengths_in_order.push_back(lengths_tokens[index]);
  std::vector<std::vector<int>> bins =
      PackFirstFitInOrder(lengths_in_order, sp_size, capacity_tokens_per_rank);
  for (std::vector<int>& bin : bins) {
    for (int& position : bin) position = order[position];
  }
  return bins;
}

std::vector<std::vector<int>> PackFirstFitInOrder(
    absl::Span<const int64_t> lengths_in_order, int sp_size,
    int64_t capacity_tokens_per_rank) {
  // First fit: while there are few bins, a scan of their free room finds
  // the first with room for a sequence; past kScannedBins, a max tree over
  // the free room (O(log bins)) descends towards the leftmost leaf that
  // holds enough. free_room[b] is bin b's free tokens per rank (0: closed)
  // until the tree is built; then room[leaves + b] is (-1: no such bin yet)
  // and room[v] the most of its two children. The tree doubles as bins are
  // opened.
  constexpr size_t kScannedBins = 32;
  std::vector<int64_t> free_room;
  std::vector<int64_t> room;  // empty until there are over kScannedBins
  size_t leaves = 0;
  auto update = [&](size_t bin, int64_t value) {
    if (room.empty()) {
      free_room[bin] = value;
      return;
    }
    size_t v = leaves + bin;
    room[v] = value;
    for (v /= 2; v >= 1; v /= 2) {
      const int64_t most = std::max(room[2 * v], room[2 * v + 1]);
      if (room[v] == most) break;  // nothing above changes either
      room[v] = most;
    }
  };
  // The first bin with at least `tokens` free, or -1.
  auto first_with_room = [&](int64_t tokens) -> int64_t {
    if (room.empty()) {
      for (size_t b = 0; b < free_room.size(); ++b) {
        if (free_room[b] >= tokens) return static_cast<int64_t>(b);
      }
      return -1;
    }
    if (room[1] < tokens) return -1;
    size_t v = 1;
    while (v < leaves) v = room[2 * v] >= tokens ? 2 * v : 2 * v + 1;
    return static_cast<int64_t>(v - leaves);
  };
  auto open_bin = [&](size_t bin, int64_t value) {
    if (room.empty()) {
      free_room.push_back(value);
      if (free_room.size() <= kScannedBins) return;
      leaves = 2 * kScannedBins;
      room.assign(2 * leaves, -1);
      std::copy(free_room.begin(), free_room.end(), room.begin() + leaves);
      for (size_t v = leaves - 1; v >= 1; --v) {
        room[v] = std::max(room[2 * v], room[2 * v + 1]);
      }
      return;
    }
    if (bin == leaves) {
      std::vector<int64_t> grown(4 * leaves, -1);
      std::copy(room.begin() + leaves, room.end(), grown.begin() + 2 * leaves);
      leaves *= 2;
      for (size_t v = leaves - 1; v >= 1; --v) {
        grown[v] = std::max(grown[2 * v], grown[2 * v + 1]);
      }
      room = std::move(grown);
    }
    update(bin, value);
  };
  std::vector<std::vector<int>> bins;
  for (int index = 0; index < static_cast<int>(lengths_in_order.size());
       ++index) {
    const int64_t tokens = TokensPerRank(lengths_in_order[index], sp_size);
    if (tokens > capacity_tokens_per_rank) {
      open_bin(bins.size(), 0);  // a bin of its own, closed
      bins.push_back({index});
      continue;
    }
    if (const int64_t b = first_with_room(tokens); b >= 0) {
      bins[b].push_back(index);
      update(b, (room.empty() ? free_room[b] : room[leaves + b]) - tokens);
    } else {
      open_bin(bins.size(), capacity_tokens_per_rank - tokens);
      bins.push_back({index});
    }
  }
  return bins;
}

std::vector<std::vector<int>> BalanceIntoBins(
    absl::Span<const int> sequence_indices,
    absl::Span<const int64_t> lengths_tokens, int sp_size, int num_bins) {
  num_bins = std::max(1, num_bins);
  std::vector<std::vector<int>> bins(num_bins);
  using Entry = std::pair<int64_t, int>;  // (tokens, bin)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> lightest;
  for (int b = 0; b < num_bins; ++b) lightest.push({0, b});
  for (int index : LongestFirst(sequence_indices, lengths_tokens)) {
    auto [tokens, b] = lightest.top();
    lightest.pop();
    bins[b].push_back(index);
    lightest.push({tokens + TokensPerRank(lengths_tokens[index], sp_size), b});
  }
  bins.erase(
      std::remove_if(bins.begin(), bins.end(),
                     [](const std::vector<int>& bin) { return bin.empty(); }),
      bins.end());
  return bins;
}

}  // namespace dcp
