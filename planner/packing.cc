#include "planner/packing.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

namespace dcp {
namespace {

std::vector<int> LongestFirst(absl::Span<const int> sequence_indices,
                              absl::Span<const int64_t> lengths_tokens) {
  std::vector<int> order(sequence_indices.begin(), sequence_indices.end());
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (lengths_tokens[a] != lengths_tokens[b]) {
      return lengths_tokens[a] > lengths_tokens[b];
    }
    return a < b;
  });
  return order;
}

}  // namespace

std::vector<std::vector<int>> PackFirstFitDecreasing(
    absl::Span<const int> sequence_indices,
    absl::Span<const int64_t> lengths_tokens, int sp_size,
    int64_t capacity_tokens_per_rank) {
  // First fit in O(n log n): a max tree over the bins' free room finds the
  // first bin with room for a sequence by descending towards the leftmost
  // leaf that holds enough. There are at most n bins.
  const size_t n = sequence_indices.size();
  size_t leaves = 1;
  while (leaves < n) leaves *= 2;
  // room[leaves + b]: free tokens per rank of bin b (-1: no such bin yet,
  // 0: closed); room[v]: the most of its two children.
  std::vector<int64_t> room(2 * leaves, -1);
  auto set_room = [&](size_t bin, int64_t value) {
    size_t v = leaves + bin;
    room[v] = value;
    for (v /= 2; v >= 1; v /= 2) room[v] = std::max(room[2 * v], room[2 * v + 1]);
  };
  std::vector<std::vector<int>> bins;
  for (int index : LongestFirst(sequence_indices, lengths_tokens)) {
    const int64_t tokens = TokensPerRank(lengths_tokens[index], sp_size);
    if (tokens > capacity_tokens_per_rank) {
      set_room(bins.size(), 0);  // a bin of its own, closed
      bins.push_back({index});
      continue;
    }
    size_t b;
    if (room[1] >= tokens) {
      size_t v = 1;
      while (v < leaves) v = room[2 * v] >= tokens ? 2 * v : 2 * v + 1;
      b = v - leaves;
    } else {
      b = bins.size();
      bins.emplace_back();
      room[leaves + b] = capacity_tokens_per_rank;
    }
    bins[b].push_back(index);
    set_room(b, room[leaves + b] - tokens);
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
  bins.erase(std::remove_if(bins.begin(), bins.end(),
                            [](const std::vector<int>& bin) {
                              return bin.empty();
                            }),
             bins.end());
  return bins;
}

}  // namespace dcp
