// Refinement against a toy group timer (a group takes the sum of its
// lengths over its SP size): moves even out the groups, swaps and splits
// anew fix what single moves cannot, and it never makes the step slower.
#include "planner/search/refinement.h"

#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "cost_model/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/test_cost_model.h"
#include "planner/search/batch_table.h"

namespace dcp {
namespace {

using ::testing::UnorderedElementsAre;

// Seconds = tokens / SP size / 1e6; no backward hides anything.
GroupTimer ToyTimer(const std::vector<int64_t>& lengths) {
  return [&lengths](const std::vector<int>& sequences, int sp_size) {
    GroupTime time;
    for (int i : sequences) time.seconds += lengths[i];
    time.seconds /= 1e6 * sp_size;
    return time;
  };
}

double Slowest(const Assignment& assignment,
               const std::vector<int64_t>& lengths) {
  double slowest = 0;
  for (const std::vector<int>& group : assignment.group_sequences) {
    double tokens = 0;
    for (int i : group) tokens += lengths[i];
    slowest = std::max(slowest, tokens / 1e6);
  }
  return slowest;
}

// Groups of the fixture's one SP size running `group_sequences`.
Assignment GroupsOf(std::vector<std::vector<int>> group_sequences) {
  Assignment assignment;
  assignment.group_size_index.assign(group_sequences.size(), 0);
  assignment.group_sequences = std::move(group_sequences);
  return assignment;
}

struct Fixture {
  explicit Fixture(std::vector<int64_t> batch)
      : cost_model(MakeCostModel("llama3-8b", 1, 8)),
        lengths(std::move(batch)),
        table(BatchTable::Build(cost_model, lengths, sizes).value()) {}

  Assignment Refine(Assignment assignment) {
    Refinement refinement(table, lengths, sizes, /*all_reduce_seconds=*/0,
                          ToyTimer(lengths), thorough_timed);
    return refinement.Run(std::move(assignment));
  }

  CostModel cost_model;
  std::vector<int64_t> lengths;
  std::vector<int> sizes = {1};
  BatchTable table;
  int64_t thorough_timed = 0;
};

TEST(RefinementTest, MovesEvenOutTwoGroups) {
  Fixture fixture({4000, 3000, 2000, 1000});
  const Assignment refined = fixture.Refine(GroupsOf({{0, 1, 2, 3}, {}}));
  // 10,000 tokens split 5,000 / 5,000.
  EXPECT_DOUBLE_EQ(Slowest(refined, fixture.lengths), 0.005);
  std::vector<int> all;
  for (const auto& group : refined.group_sequences) {
    all.insert(all.end(), group.begin(), group.end());
  }
  EXPECT_THAT(all, UnorderedElementsAre(0, 1, 2, 3));
  EXPECT_GT(fixture.thorough_timed, 0);
}

TEST(RefinementTest, ASwapFixesWhatNoSingleMoveCan) {
  // {5000, 3000} against {4000, 2000}: moving any one sequence makes the
  // step slower, swapping 3000 for 2000 gives 7000 / 7000.
  Fixture fixture({5000, 4000, 3000, 2000});
  const Assignment refined = fixture.Refine(GroupsOf({{0, 2}, {1, 3}}));
  EXPECT_DOUBLE_EQ(Slowest(refined, fixture.lengths), 0.007);
}

TEST(RefinementTest, NeverSlowerAndStableOnceBalanced) {
  Fixture fixture({3000, 3000, 3000, 3000});
  const Assignment balanced = GroupsOf({{0, 1}, {2, 3}});
  EXPECT_EQ(fixture.Refine(balanced).group_sequences, balanced.group_sequences);
  // One group: nothing to refine.
  const Assignment one = GroupsOf({{0, 1, 2, 3}});
  EXPECT_EQ(fixture.Refine(one).group_sequences, one.group_sequences);
}

}  // namespace
}  // namespace dcp
