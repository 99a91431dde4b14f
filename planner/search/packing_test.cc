// Unit tests of the packing helpers: tokens per rank, first-fit-decreasing
// micro-batches and token-balanced bins.
#include "planner/search/packing.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/plan_testing.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAreArray;

std::vector<int> AllIndices(const std::vector<int64_t>& lengths) {
  std::vector<int> indices(lengths.size());
  std::iota(indices.begin(), indices.end(), 0);
  return indices;
}

int64_t BinTokens(const std::vector<int>& bin,
                  const std::vector<int64_t>& lengths, int sp_size) {
  int64_t tokens = 0;
  for (int i : bin) tokens += TokensPerRank(lengths[i], sp_size);
  return tokens;
}

// Every index of `expected` appears in exactly one bin, nothing else does.
void ExpectEachIndexOnce(const std::vector<std::vector<int>>& bins,
                         const std::vector<int>& expected) {
  std::vector<int> seen;
  for (const std::vector<int>& bin : bins) {
    seen.insert(seen.end(), bin.begin(), bin.end());
  }
  EXPECT_THAT(seen, UnorderedElementsAreArray(expected));
}

// Deterministic skewed lengths: mostly short, a few long.
std::vector<int64_t> SkewedLengths(int count) {
  std::vector<int64_t> lengths;
  uint64_t state = 12345;
  for (int i = 0; i < count; ++i) {
    state = NextLcgState(state);
    const int64_t r = static_cast<int64_t>(state >> 33);
    lengths.push_back(i % 17 == 0 ? 20000 + r % 30000 : 1 + r % 3000);
  }
  return lengths;
}

// `pack` gives the same bins for the indices of `lengths` twice, and for
// them in reverse order.
void ExpectDeterministic(
    const std::vector<int64_t>& lengths,
    const std::function<std::vector<std::vector<int>>(const std::vector<int>&)>&
        pack) {
  const std::vector<int> indices = AllIndices(lengths);
  const std::vector<int> reversed(indices.rbegin(), indices.rend());
  const std::vector<std::vector<int>> first = pack(indices);
  EXPECT_EQ(first, pack(indices));
  // The order the indices come in does not matter either.
  EXPECT_EQ(first, pack(reversed));
}

TEST(TokensPerRankTest, RoundsUpToWholeTokens) {
  EXPECT_EQ(TokensPerRank(/*length_tokens=*/8, /*sp_size=*/1), 8);
  EXPECT_EQ(TokensPerRank(/*length_tokens=*/8, /*sp_size=*/2), 4);
  EXPECT_EQ(TokensPerRank(/*length_tokens=*/7, /*sp_size=*/2), 4);
  EXPECT_EQ(TokensPerRank(/*length_tokens=*/9, /*sp_size=*/8), 2);
  EXPECT_EQ(TokensPerRank(/*length_tokens=*/1, /*sp_size=*/8), 1);
  EXPECT_EQ(TokensPerRank(/*length_tokens=*/16, /*sp_size=*/16), 1);
  EXPECT_EQ(TokensPerRank(/*length_tokens=*/17, /*sp_size=*/16), 2);
  EXPECT_EQ(TokensPerRank(/*length_tokens=*/int64_t{1} << 40, /*sp_size=*/8),
            int64_t{1} << 37);
}

// As the stable sort by length of the indices in order would give them, on
// a subset given out of order too.
TEST(LongestFirstTest, LongestFirstTiesByIndex) {
  const std::vector<int64_t> lengths = {5, 7, 5, 9, 7, 5};
  EXPECT_THAT(LongestFirst(AllIndices(lengths), lengths),
              ElementsAre(3, 1, 4, 0, 2, 5));
  EXPECT_THAT(LongestFirst({5, 2, 4, 0}, lengths), ElementsAre(4, 0, 2, 5));
}

TEST(LongestFirstTest, EveryIndexLongestFirstTiesByIndex) {
  const std::vector<int64_t> lengths = {5, 7, 5, 9, 7, 5};
  EXPECT_THAT(LongestFirst(lengths), ElementsAre(3, 1, 4, 0, 2, 5));
  EXPECT_THAT(LongestFirst(std::vector<int64_t>{1, 2, 3}),
              ElementsAre(2, 1, 0));
  EXPECT_THAT(LongestFirst(std::vector<int64_t>{}), ElementsAre());
}

TEST(PackFirstFitDecreasingTest, PacksLongestFirstIntoTheFirstBinWithRoom) {
  // Capacity 10: 7 opens bin 0, 6 opens bin 1, 4 joins 6, 3 joins 7,
  // 2 opens bin 2 (7+3 = 10 and 6+4 = 10 are full).
  const std::vector<int64_t> lengths = {3, 7, 2, 6, 4};
  std::vector<std::vector<int>> bins =
      PackFirstFitDecreasing(AllIndices(lengths), lengths, /*sp_size=*/1,
                             /*capacity_tokens_per_rank=*/10);
  EXPECT_THAT(
      bins, ElementsAre(ElementsAre(1, 0), ElementsAre(3, 4), ElementsAre(2)));
}

TEST(PackFirstFitDecreasingTest, CountsTokensPerRankOfTheSpGroup) {
  // At SP 4, lengths 13 and 7 take 4 and 2 tokens per rank: both fit 6.
  const std::vector<int64_t> lengths = {13, 7};
  std::vector<std::vector<int>> bins =
      PackFirstFitDecreasing(AllIndices(lengths), lengths, /*sp_size=*/4,
                             /*capacity_tokens_per_rank=*/6);
  EXPECT_THAT(bins, ElementsAre(ElementsAre(0, 1)));
  // Rounding matters: at capacity 5 they no longer share.
  bins = PackFirstFitDecreasing(AllIndices(lengths), lengths, /*sp_size=*/4,
                                /*capacity_tokens_per_rank=*/5);
  EXPECT_THAT(bins, ElementsAre(ElementsAre(0), ElementsAre(1)));
}

TEST(PackFirstFitDecreasingTest, TiesAreBrokenByIndex) {
  const std::vector<int64_t> lengths = {5, 5, 5, 5, 5};
  // Given in scrambled order; equal lengths go lowest index first.
  const std::vector<int> indices = {3, 0, 4, 2, 1};
  std::vector<std::vector<int>> bins = PackFirstFitDecreasing(
      indices, lengths, /*sp_size=*/1, /*capacity_tokens_per_rank=*/10);
  EXPECT_THAT(
      bins, ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3), ElementsAre(4)));
}

TEST(PackFirstFitDecreasingTest, OverCapacitySequenceGetsABinOfItsOwn) {
  const std::vector<int64_t> lengths = {4, 25, 3, 12, 11};
  std::vector<std::vector<int>> bins =
      PackFirstFitDecreasing(AllIndices(lengths), lengths, /*sp_size=*/1,
                             /*capacity_tokens_per_rank=*/10);
  // 25, 12 and 11 are each alone; 4 and 3 share.
  EXPECT_THAT(bins, ElementsAre(ElementsAre(1), ElementsAre(3), ElementsAre(4),
                                ElementsAre(0, 2)));
}

TEST(PackFirstFitDecreasingTest, SubsetOfIndicesOnly) {
  const std::vector<int64_t> lengths = {9, 1, 8, 2, 7};
  std::vector<std::vector<int>> bins =
      PackFirstFitDecreasing(std::vector<int>{4, 1}, lengths, /*sp_size=*/1,
                             /*capacity_tokens_per_rank=*/10);
  EXPECT_THAT(bins, ElementsAre(ElementsAre(4, 1)));
  EXPECT_TRUE(PackFirstFitDecreasing({}, lengths, /*sp_size=*/1,
                                     /*capacity_tokens_per_rank=*/10)
                  .empty());
}

TEST(PackFirstFitDecreasingTest, CapacityHeldAndEveryIndexOnceOnSkewedBatch) {
  const std::vector<int64_t> lengths = SkewedLengths(500);
  const std::vector<int> indices = AllIndices(lengths);
  for (int sp_size : {1, 2, 8}) {
    for (int64_t capacity : {int64_t{1000}, int64_t{4096}, int64_t{30000}}) {
      SCOPED_TRACE(testing::Message()
                   << "SP " << sp_size << ", capacity " << capacity);
      std::vector<std::vector<int>> bins =
          PackFirstFitDecreasing(indices, lengths, sp_size, capacity);
      ExpectEachIndexOnce(bins, indices);
      for (const std::vector<int>& bin : bins) {
        ASSERT_FALSE(bin.empty());
        if (bin.size() > 1) {
          EXPECT_LE(BinTokens(bin, lengths, sp_size), capacity);
        }
        for (int i : bin) {
          if (TokensPerRank(lengths[i], sp_size) > capacity) {
            EXPECT_EQ(bin.size(), 1u)
                << "over-capacity sequence " << i << " shares a micro-batch";
          }
        }
      }
      // Not wasteful: first fit never leaves two bins at most half full, so
      // it uses fewer than twice the bins the fitting tokens need.
      int64_t fitting_tokens = 0;
      int over = 0;
      for (int i : indices) {
        const int64_t t = TokensPerRank(lengths[i], sp_size);
        if (t > capacity) {
          ++over;
        } else {
          fitting_tokens += t;
        }
      }
      const int64_t least_bins = (fitting_tokens + capacity - 1) / capacity;
      EXPECT_LE(static_cast<int64_t>(bins.size()), over + 2 * least_bins + 1);
    }
  }
}

TEST(PackFirstFitDecreasingTest, Deterministic) {
  const std::vector<int64_t> lengths = SkewedLengths(300);
  ExpectDeterministic(lengths, [&](const std::vector<int>& indices) {
    return PackFirstFitDecreasing(indices, lengths, /*sp_size=*/2,
                                  /*capacity_tokens_per_rank=*/5000);
  });
}

// First fit as its definition reads: scan the bins from the first for one
// with room. The packer must match it bin for bin.
std::vector<std::vector<int>> ScanningFirstFit(
    std::vector<int> indices, const std::vector<int64_t>& lengths, int sp_size,
    int64_t capacity) {
  std::sort(indices.begin(), indices.end(), [&](int a, int b) {
    return lengths[a] != lengths[b] ? lengths[a] > lengths[b] : a < b;
  });
  std::vector<std::vector<int>> bins;
  std::vector<int64_t> load;
  for (int i : indices) {
    const int64_t tokens = TokensPerRank(lengths[i], sp_size);
    size_t b = 0;
    if (tokens > capacity) {
      b = bins.size();
    } else {
      while (b < bins.size() && load[b] + tokens > capacity) ++b;
    }
    if (b == bins.size()) {
      bins.emplace_back();
      load.push_back(tokens > capacity ? capacity : 0);
    }
    bins[b].push_back(i);
    if (tokens <= capacity) load[b] += tokens;
  }
  return bins;
}

TEST(PackFirstFitDecreasingTest, SameBinsAsScanningEveryBin) {
  for (int count : {1, 2, 3, 7, 64, 65, 1000}) {
    const std::vector<int64_t> lengths = SkewedLengths(count);
    for (int sp_size : {1, 4}) {
      for (int64_t capacity : {int64_t{500}, int64_t{3000}, int64_t{40000}}) {
        SCOPED_TRACE(testing::Message() << count << " sequences, SP " << sp_size
                                        << ", capacity " << capacity);
        EXPECT_EQ(
            PackFirstFitDecreasing(AllIndices(lengths), lengths, sp_size,
                                   capacity),
            ScanningFirstFit(AllIndices(lengths), lengths, sp_size, capacity));
      }
    }
  }
}

TEST(PackFirstFitInOrderTest, SameBinsAsPackFirstFitDecreasingByPosition) {
  for (int count : {1, 2, 3, 7, 64, 65, 1000}) {
    const std::vector<int64_t> lengths = SkewedLengths(count);
    // Longest first, ties by index: the order the callers keep.
    std::vector<int> order = AllIndices(lengths);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return lengths[a] > lengths[b]; });
    std::vector<int64_t> in_order;
    for (int i : order) in_order.push_back(lengths[i]);
    for (int sp_size : {1, 3, 4}) {
      for (int64_t capacity : {int64_t{500}, int64_t{3000}, int64_t{40000}}) {
        SCOPED_TRACE(testing::Message() << count << " sequences, SP " << sp_size
                                        << ", capacity " << capacity);
        std::vector<std::vector<int>> by_index;
        for (const std::vector<int>& bin :
             PackFirstFitInOrder(in_order, sp_size, capacity)) {
          by_index.emplace_back();
          for (int position : bin) by_index.back().push_back(order[position]);
        }
        EXPECT_EQ(by_index, PackFirstFitDecreasing(AllIndices(lengths), lengths,
                                                   sp_size, capacity));
      }
    }
  }
}

TEST(BalanceIntoBinsTest, LongestFirstIntoTheLightestBin) {
  // 9 -> bin 0; 7 -> bin 1; 5 -> bin 1 (7 < 9); 4 -> bin 0 (9 < 12).
  const std::vector<int64_t> lengths = {4, 9, 5, 7};
  std::vector<std::vector<int>> bins =
      BalanceIntoBins(AllIndices(lengths), lengths, /*sp_size=*/1,
                      /*num_bins=*/2);
  EXPECT_THAT(bins, ElementsAre(ElementsAre(1, 0), ElementsAre(3, 2)));
}

TEST(BalanceIntoBinsTest, TiesGoToTheLowerBinAndLowerIndex) {
  const std::vector<int64_t> lengths = {6, 6, 6, 6};
  std::vector<std::vector<int>> bins = BalanceIntoBins(
      std::vector<int>{2, 3, 1, 0}, lengths, /*sp_size=*/1, /*num_bins=*/3);
  EXPECT_THAT(bins,
              ElementsAre(ElementsAre(0, 3), ElementsAre(1), ElementsAre(2)));
}

TEST(BalanceIntoBinsTest, BalancedWithinTheLongestItem) {
  const std::vector<int64_t> lengths = SkewedLengths(400);
  const std::vector<int> indices = AllIndices(lengths);
  for (int sp_size : {1, 4}) {
    for (int num_bins : {2, 3, 7, 32}) {
      SCOPED_TRACE(testing::Message()
                   << "SP " << sp_size << ", " << num_bins << " bins");
      std::vector<std::vector<int>> bins =
          BalanceIntoBins(indices, lengths, sp_size, num_bins);
      ASSERT_EQ(bins.size(), static_cast<size_t>(num_bins));
      ExpectEachIndexOnce(bins, indices);
      int64_t longest = 0;
      for (int i : indices) {
        longest = std::max(longest, TokensPerRank(lengths[i], sp_size));
      }
      int64_t most = 0;
      int64_t least = INT64_MAX;
      for (const std::vector<int>& bin : bins) {
        most = std::max(most, BinTokens(bin, lengths, sp_size));
        least = std::min(least, BinTokens(bin, lengths, sp_size));
      }
      EXPECT_LE(most - least, longest);
    }
  }
}

TEST(BalanceIntoBinsTest, EmptyBinsAreDropped) {
  const std::vector<int64_t> lengths = {10, 20};
  std::vector<std::vector<int>> bins = BalanceIntoBins(
      AllIndices(lengths), lengths, /*sp_size=*/1, /*num_bins=*/5);
  EXPECT_THAT(bins, ElementsAre(ElementsAre(1), ElementsAre(0)));
  EXPECT_TRUE(
      BalanceIntoBins({}, lengths, /*sp_size=*/1, /*num_bins=*/3).empty());
}

TEST(BalanceIntoBinsTest, NonPositiveBinCountMeansOneBin) {
  const std::vector<int64_t> lengths = {3, 1, 2};
  for (int num_bins : {0, -4}) {
    std::vector<std::vector<int>> bins =
        BalanceIntoBins(AllIndices(lengths), lengths, /*sp_size=*/1, num_bins);
    EXPECT_THAT(bins, ElementsAre(ElementsAre(0, 2, 1)));
  }
}

TEST(BalanceIntoBinsTest, Deterministic) {
  const std::vector<int64_t> lengths = SkewedLengths(200);
  ExpectDeterministic(lengths, [&](const std::vector<int>& indices) {
    return BalanceIntoBins(indices, lengths, /*sp_size=*/2, /*num_bins=*/6);
  });
}

}  // namespace
}  // namespace dcp
