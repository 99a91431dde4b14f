#include "planner/exact/layout_milp.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "planner/exact/cbc_milp.h"

namespace dcp {
namespace {

constexpr int kSequences = 3;
constexpr int kLayers = 2;
constexpr double kAllReduce = 2.0;  // milliseconds

// Three sequences on SP 2, where every one fits, and on SP 1, where the
// third fits at no level.
AffineSize Sp2() {
  AffineSize a;
  a.sp_size = 2;
  a.fixed_total = 1e-3, a.fixed_backward = 6e-4, a.fixed_recompute = 2e-4;
  a.total = {2e-3, 3e-3, 4e-3};
  a.backward = {1.2e-3, 1.8e-3, 2.4e-3};
  a.recompute = {5e-4, 7e-4, 9e-4};
  a.tokens = {100, 200, 300};
  a.capacity = {250, 400, 600};
  a.fits = {1, 1, 1};
  return a;
}

AffineSize Sp1() {
  AffineSize a = Sp2();
  a.sp_size = 1;
  a.tokens = {200, 400, 600};
  a.capacity = {250, 500, 450};
  a.fits = {1, 1, 0};
  return a;
}

// The layout {2, 1, 1}: two interchangeable groups of SP 1.
class LayoutMilpTest : public testing::Test {
 protected:
  LayoutMilpTest()
      : sp2_(Sp2()),
        sp1_(Sp1()),
        affine_({&sp2_, &sp1_, &sp1_}),
        big_(StepBigM(affine_, kSequences, kLayers, kAllReduce,
                      MilpProblem::kInfinity)),
        milp_(BuildLayoutMilp(layout_, affine_, kSequences, kLayers, kAllReduce,
                              big_)) {}

  const MilpProblem& p() const { return milp_.problem; }

  bool IsBinary(int column) const {
    return p().is_integer(column) && p().column_lower(column) == 0 &&
           p().column_upper(column) == 1;
  }

  // The terms of row r, keyed by column.
  std::vector<std::pair<int, double>> Sorted(int r) const {
    std::vector<std::pair<int, double>> terms = p().row(r);
    std::sort(terms.begin(), terms.end());
    return terms;
  }

  const std::vector<int> layout_ = {2, 1, 1};
  const AffineSize sp2_, sp1_;
  const std::vector<const AffineSize*> affine_;
  const double big_;
  const LayoutMilp milp_;
};

TEST_F(LayoutMilpTest, EverySequenceFitsNeedsAGroupForEachSequence) {
  EXPECT_TRUE(EverySequenceFits(affine_, kSequences));
  EXPECT_FALSE(EverySequenceFits({&sp1_, &sp1_}, kSequences));
  EXPECT_TRUE(EverySequenceFits({&sp1_}, kSequences - 1));
}

TEST_F(LayoutMilpTest, BigMIsFinitePositiveAndCappedByTheUpperBound) {
  EXPECT_TRUE(std::isfinite(big_));
  EXPECT_GT(big_, kAllReduce);
  const double capped =
      StepBigM(affine_, kSequences, kLayers, kAllReduce, 1e-3);
  EXPECT_DOUBLE_EQ(capped, 1e-3 * kMilpMilliseconds * 1.001);
  // Every coefficient finite; only bounds may be infinite.
  for (int r = 0; r < p().num_rows(); ++r) {
    for (const auto& [column, value] : p().row(r)) {
      ASSERT_TRUE(std::isfinite(value)) << "row " << r;
      ASSERT_GE(column, 0);
      ASSERT_LT(column, p().num_columns());
    }
    EXPECT_LE(p().row_lower(r), p().row_upper(r)) << "row " << r;
  }
}

TEST_F(LayoutMilpTest, ColumnsPerSequenceAndGroup) {
  ASSERT_EQ(milp_.slots.size(), layout_.size());
  ASSERT_EQ(milp_.designated.size(), layout_.size());
  // The step and exposed all-reduce, then per group its designated and
  // last-backward columns and per slot one column per sequence that fits,
  // one per level, the recompute and the runs-last flag.
  int columns = 2;
  std::set<int> seen;
  for (int g = 0; g < static_cast<int>(layout_.size()); ++g) {
    const AffineSize& a = *affine_[g];
    const int fitting =
        static_cast<int>(std::count(a.fits.begin(), a.fits.end(), 1));
    EXPECT_TRUE(IsBinary(milp_.designated[g]));
    ASSERT_FALSE(milp_.slots[g].empty()) << "group " << g;
    EXPECT_LE(static_cast<int>(milp_.slots[g].size()), fitting);
    columns += 2;
    for (const LayoutMilp::Slot& slot : milp_.slots[g]) {
      ASSERT_EQ(slot.x.size(), static_cast<size_t>(kSequences));
      for (int i = 0; i < kSequences; ++i) {
        EXPECT_EQ(slot.x[i] >= 0, a.fits[i] != 0) << "group " << g;
        EXPECT_TRUE(slot.x[i] < 0 || IsBinary(slot.x[i])) << "group " << g;
      }
      ASSERT_FALSE(slot.level.empty());
      EXPECT_LE(slot.level.size(), static_cast<size_t>(kLayers + 1));
      for (int l : slot.level) EXPECT_TRUE(IsBinary(l));
      EXPECT_TRUE(IsBinary(slot.last));
      EXPECT_FALSE(p().is_integer(slot.recompute));
      columns += fitting + static_cast<int>(slot.level.size()) + 2;
      for (int c : slot.x) {
        EXPECT_TRUE(c < 0 || seen.insert(c).second) << "column " << c;
      }
      for (int c : slot.level) EXPECT_TRUE(seen.insert(c).second);
      EXPECT_TRUE(seen.insert(slot.recompute).second);
      EXPECT_TRUE(seen.insert(slot.last).second);
    }
  }
  EXPECT_EQ(p().num_columns(), columns);
  // Slots capped at the sequences that fit; levels up to the first that
  // holds the group's share (SP 1: level 1 holds 500 tokens, level 2 less).
  EXPECT_EQ(milp_.slots[0].size(), 3u);
  EXPECT_EQ(milp_.slots[0][0].level.size(), 3u);
  EXPECT_EQ(milp_.slots[1].size(), 2u);
  EXPECT_EQ(milp_.slots[1][0].level.size(), 2u);
  // The objective: the step (column 0) plus the exposed all-reduce.
  EXPECT_EQ(p().objective(0), 1);
  EXPECT_EQ(p().column_upper(0), big_);
  EXPECT_EQ(p().objective(1), 1);
  EXPECT_EQ(p().column_upper(1), kAllReduce);
  for (int c = 2; c < p().num_columns(); ++c) EXPECT_EQ(p().objective(c), 0);
}

TEST_F(LayoutMilpTest, EverySequenceHasOneAssignmentRow) {
  std::vector<std::pair<int, double>> designated;
  for (int column : milp_.designated) designated.push_back({column, 1});
  int designated_rows = 0;
  for (int r = 0; r < p().num_rows(); ++r) {
    if (Sorted(r) == designated && p().row_lower(r) == 1 &&
        p().row_upper(r) == 1) {
      ++designated_rows;
    }
  }
  EXPECT_EQ(designated_rows, 1);
  for (int i = 0; i < kSequences; ++i) {
    // Its choices: its column in every slot it can take, summed to 1.
    std::vector<std::pair<int, double>> choices;
    for (const std::vector<LayoutMilp::Slot>& group : milp_.slots) {
      for (const LayoutMilp::Slot& slot : group) {
        if (slot.x[i] >= 0) choices.push_back({slot.x[i], 1});
      }
    }
    std::sort(choices.begin(), choices.end());
    ASSERT_FALSE(choices.empty());
    int rows = 0;
    for (int r = 0; r < p().num_rows(); ++r) {
      if (Sorted(r) == choices && p().row_lower(r) == 1 &&
          p().row_upper(r) == 1) {
        ++rows;
      }
    }
    EXPECT_EQ(rows, 1) << "sequence " << i;
  }
}

TEST_F(LayoutMilpTest, StepRowsReferenceEveryGroup) {
  for (int g = 0; g < static_cast<int>(layout_.size()); ++g) {
    // step >= the group's time: every sequence and recompute of its slots,
    // and step <= it + big when it is not the designated group.
    int at_least = 0, at_most = 0;
    for (int r = 0; r < p().num_rows(); ++r) {
      const std::vector<std::pair<int, double>>& row = p().row(r);
      auto coefficient = [&](int column) {
        for (const auto& [c, value] : row) {
          if (c == column) return value;
        }
        return 0.0;
      };
      if (coefficient(0) != 1) continue;
      bool whole = true;
      for (const LayoutMilp::Slot& slot : milp_.slots[g]) {
        for (int c : slot.x) whole = whole && (c < 0 || coefficient(c) < 0);
        whole = whole && coefficient(slot.recompute) == -1;
      }
      if (!whole) continue;
      if (p().row_lower(r) == 0 && p().row_upper(r) == MilpProblem::kInfinity)
        ++at_least;
      if (coefficient(milp_.designated[g]) == big_ &&
          p().row_upper(r) == big_) {
        ++at_most;
      }
    }
    EXPECT_EQ(at_least, 1) << "group " << g;
    EXPECT_EQ(at_most, 1) << "group " << g;
  }
}

}  // namespace
}  // namespace dcp
