// BatchTable: classes of repeated lengths, the orders the search walks, the
// items Assign places, and the errors of a sequence that fits nowhere.
#include "planner/search/batch_table.h"

#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "cost_model/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/test_cost_model.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BatchTableTest, RepeatedLengthsShareAClassAndItsEstimates) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = {4096, 65536, 4096, 1024, 65536};
  absl::StatusOr<BatchTable> table =
      BatchTable::Build(cost_model, lengths, {1, 2, 4, 8});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->num_classes(), 3);
  // Classes by increasing length.
  EXPECT_EQ(table->class_count(0), 1);  // 1024
  EXPECT_EQ(table->class_count(1), 2);  // 4096
  EXPECT_EQ(table->class_count(2), 2);  // 65536
  EXPECT_EQ(table->Estimate(0, 2), table->Estimate(2, 2));
  EXPECT_EQ(table->MinSizeIndex(1), table->MinSizeIndex(4));
  // A longer sequence needs at least the size of a shorter one and adds
  // more on every size both fit.
  EXPECT_GE(table->MinSizeIndex(1), table->MinSizeIndex(0));
  for (int j = table->MinSizeIndex(1); j < 4; ++j) {
    EXPECT_GT(table->Estimate(1, j), table->Estimate(0, j));
    EXPECT_TRUE(std::isfinite(table->Estimate(1, j)));
  }
  for (int j = 0; j < table->MinSizeIndex(1); ++j) {
    EXPECT_TRUE(std::isinf(table->Estimate(1, j)));
  }
  EXPECT_EQ(table->max_min_size_index(), table->MinSizeIndex(1));
  // Longest first, ties by index.
  EXPECT_THAT(table->longest_first(), ElementsAre(1, 4, 0, 2, 3));
  std::vector<int> group = {1, 3};
  table->InsertInOrder(group, 2);
  EXPECT_THAT(group, ElementsAre(1, 2, 3));
  // Small batches: one item per sequence, with the sequence's estimates.
  EXPECT_EQ(table->num_items(), 5);
  std::set<int> items;
  for (int i = 0; i < 5; ++i) {
    const int item = table->item_of(i);
    items.insert(item);
    EXPECT_EQ(table->item_min_size_index(item), table->MinSizeIndex(i));
    EXPECT_EQ(table->item_estimates(item)[3], table->Estimate(i, 3));
  }
  EXPECT_EQ(items.size(), 5u);
  EXPECT_GT(table->lower_bound(), 0);
  EXPECT_TRUE(table->squares_exact());
  for (int j = 0; j < 4; ++j) {
    EXPECT_GT(table->capacity_full_recompute(j),
              table->capacity_no_recompute(j));
    EXPECT_GT(table->micro_batch_overhead(j), 0);
  }
}

TEST(BatchTableTest, LargeBatchesArePlacedInAboutKAssignItemsItems) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 4, 8);
  std::vector<int64_t> lengths;
  const int n = 4 * BatchTable::kAssignItems;
  for (int i = 0; i < n; ++i) lengths.push_back(512 + (i * 7919) % 8192);
  absl::StatusOr<BatchTable> table =
      BatchTable::Build(cost_model, lengths, {1, 2, 4, 8});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_LE(table->num_items(), 2 * BatchTable::kAssignItems);
  EXPECT_GE(table->num_items(), BatchTable::kAssignItems / 2);
  // An item's estimates are its sequences' summed.
  std::vector<double> summed(table->num_items(), 0);
  for (int i = 0; i < n; ++i) summed[table->item_of(i)] += table->Estimate(i, 0);
  for (int item = 0; item < table->num_items(); ++item) {
    EXPECT_NEAR(table->item_estimates(item)[0], summed[item],
                1e-9 * summed[item]);
  }
}

TEST(BatchTableTest, ASequenceThatFitsNowhereIsNamed) {
  const CostModel cost_model = MakeCostModel("llama3-8b", 1, 8);
  const std::vector<int64_t> lengths = {1024, int64_t{1} << 26};
  absl::StatusOr<BatchTable> table =
      BatchTable::Build(cost_model, lengths, {1, 2, 4, 8});
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(table.status().message(),
              HasSubstr("sequence 1 of 67108864 tokens needs"));
}

}  // namespace
}  // namespace dcp
