// AssignGreedily and RankLayouts on small batches of llama3-8b on 8 GPUs.
#include "planner/search/layout_ranking.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "cost_model/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/test_cost_model.h"
#include "planner/search/batch_table.h"

namespace dcp {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

const std::vector<int> kSizes = {1, 2, 4, 8};

TEST(LayoutRankingTest, AssignGreedilyPlacesEverySequenceOnceWhereItFits) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = {131072, 8192, 4096, 4096, 2048, 1024};
  const BatchTable table = BatchTable::Build(cost_model, lengths, kSizes).value();
  // One group of 4 and four of 1.
  std::optional<Assignment> assignment =
      AssignGreedily(table, kSizes, {4, 0, 1, 0});
  ASSERT_TRUE(assignment.has_value());
  std::vector<int> seen;
  for (size_t g = 0; g < assignment->group_sequences.size(); ++g) {
    for (int i : assignment->group_sequences[g]) {
      seen.push_back(i);
      EXPECT_GE(assignment->group_size_index[g], table.MinSizeIndex(i));
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, std::vector<int>({0, 1, 2, 3, 4, 5}));
  EXPECT_GT(assignment->estimated_seconds, 0);
  // Without keep_sequences only the makespan, the same.
  EXPECT_EQ(AssignGreedily(table, kSizes, {4, 0, 1, 0}, false)
                ->estimated_seconds,
            assignment->estimated_seconds);
  // The 128K sequence fits no group of one GPU.
  if (table.MinSizeIndex(0) > 0) {
    EXPECT_FALSE(AssignGreedily(table, kSizes, {8, 0, 0, 0}).has_value());
  }
}

TEST(LayoutRankingTest, RankedLayoutsFillTheWorldBestEstimateFirst) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 32; ++i) lengths.push_back(1024 + 997 * i);
  const BatchTable table = BatchTable::Build(cost_model, lengths, kSizes).value();
  std::vector<std::string> progress;
  const std::vector<std::vector<int>> layouts = RankLayouts(
      table, kSizes, cost_model.cluster(),
      [&](std::string line) { progress.push_back(std::move(line)); });
  ASSERT_FALSE(layouts.empty());
  for (const std::vector<int>& counts : layouts) {
    int gpus = 0;
    for (size_t j = 0; j < kSizes.size(); ++j) gpus += counts[j] * kSizes[j];
    EXPECT_EQ(gpus, 8);
  }
  // The homogeneous layouts are kept in the search space.
  EXPECT_THAT(layouts, Contains(std::vector<int>({8, 0, 0, 0})));
  EXPECT_THAT(layouts, Contains(std::vector<int>({0, 0, 0, 1})));
  ASSERT_EQ(progress.size(), 1u);
  EXPECT_THAT(progress[0], HasSubstr("layouts of SP groups by estimate"));
  // The same inputs give the same ranking.
  EXPECT_EQ(RankLayouts(table, kSizes, cost_model.cluster(), {}), layouts);
}

}  // namespace
}  // namespace dcp
