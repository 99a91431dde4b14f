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
  std::vector<std::vector<int>> bins;
  std::vector<int64_t> load;
  // Bins that are full to within the smallest remaining sequence are skipped
  // by starting the scan at the first bin with room for anything.
  size_t first_open = 0;
  for (int index : LongestFirst(sequence_indices, lengths_tokens)) {
    const int64_t tokens = TokensPerRank(lengths_tokens[index], sp_size);
    if (tokens > capacity_tokens_per_rank) {
      bins.push_back({index});
      load.push_back(capacity_tokens_per_rank);  // closed
      continue;
    }
    while (first_open < bins.size() && load[first_open] >= capacity_tokens_per_rank) {
      ++first_open;
    }
    size_t b = first_open;
    for (; b < bins.size(); ++b) {
      if (load[b] + tokens <= capacity_tokens_per_rank) break;
    }
    if (b == bins.size()) {
      bins.emplace_back();
      load.push_back(0);
    }
    bins[b].push_back(index);
    load[b] += tokens;
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
