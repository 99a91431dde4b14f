// Unit tests of PlaceGroups: aligned blocks inside nodes, whole nodes above,
// first ranks in the order the sizes were given, and the errors.
#include "planner/plan/layout.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cost_model/cluster_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Checks that the groups placed at `first_ranks` are aligned to their size
// (or to the node for larger groups), never cross a node unless they cover
// whole nodes, and together cover every rank exactly once.
void ExpectLegalLayout(const std::vector<int>& sizes,
                       const std::vector<int>& first_ranks,
                       const ClusterSpec& cluster) {
  ASSERT_EQ(first_ranks.size(), sizes.size());
  const int per_node = cluster.gpus_per_node;
  std::vector<int> owner(cluster.NumGpus(), -1);
  for (size_t g = 0; g < sizes.size(); ++g) {
    const int first = first_ranks[g];
    const int size = sizes[g];
    SCOPED_TRACE(testing::Message() << "group " << g << " of size " << size
                                    << " at rank " << first);
    ASSERT_GE(first, 0);
    ASSERT_LE(first + size, cluster.NumGpus());
    if (size <= per_node) {
      EXPECT_EQ(first % size, 0) << "not aligned to its size";
      EXPECT_EQ(first / per_node, (first + size - 1) / per_node)
          << "crosses a node boundary";
    } else {
      EXPECT_EQ(first % per_node, 0) << "does not start a node";
      EXPECT_EQ(size % per_node, 0) << "does not cover whole nodes";
    }
    for (int r = first; r < first + size; ++r) {
      EXPECT_EQ(owner[r], -1) << "rank " << r << " given twice";
      owner[r] = static_cast<int>(g);
    }
  }
  for (int r = 0; r < cluster.NumGpus(); ++r) {
    EXPECT_NE(owner[r], -1) << "rank " << r << " in no group";
  }
}

TEST(PlaceGroupsTest, MixedSizesLandInAlignedBlocksInsideNodes) {
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/2, /*gpus_per_node=*/8);
  const std::vector<int> sizes = {8, 4, 2, 1, 1};
  absl::StatusOr<std::vector<int>> first = PlaceGroups(sizes, cluster);
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectLegalLayout(sizes, *first, cluster);
  // Largest first, each on the first free aligned block.
  EXPECT_THAT(*first, ElementsAre(0, 8, 12, 14, 15));
}

TEST(PlaceGroupsTest, FirstRanksComeBackInInputOrder) {
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/2, /*gpus_per_node=*/8);
  const std::vector<int> sizes = {1, 2, 8, 1, 4};
  absl::StatusOr<std::vector<int>> first = PlaceGroups(sizes, cluster);
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectLegalLayout(sizes, *first, cluster);
  // The same blocks as for {8, 4, 2, 1, 1}, reported per input position;
  // equal sizes keep their input order.
  EXPECT_THAT(*first, ElementsAre(14, 12, 0, 15, 8));
}

TEST(PlaceGroupsTest, EveryPermutationGivesALegalLayout) {
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/2, /*gpus_per_node=*/8);
  std::vector<int> sizes = {1, 1, 2, 4, 8};
  do {
    absl::StatusOr<std::vector<int>> first = PlaceGroups(sizes, cluster);
    ASSERT_TRUE(first.ok()) << first.status();
    ExpectLegalLayout(sizes, *first, cluster);
  } while (std::next_permutation(sizes.begin(), sizes.end()));
}

TEST(PlaceGroupsTest, WholeNodeGroupsTakeConsecutiveNodes) {
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/8);
  {
    const std::vector<int> sizes = {16, 16};
    absl::StatusOr<std::vector<int>> first = PlaceGroups(sizes, cluster);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_THAT(*first, ElementsAre(0, 16));
  }
  {
    // A 16-GPU group between two smaller ones still gets nodes 0 and 1.
    const std::vector<int> sizes = {8, 16, 4, 4};
    absl::StatusOr<std::vector<int>> first = PlaceGroups(sizes, cluster);
    ASSERT_TRUE(first.ok()) << first.status();
    ExpectLegalLayout(sizes, *first, cluster);
    EXPECT_THAT(*first, ElementsAre(16, 0, 24, 28));
  }
  {
    const std::vector<int> sizes = {32};
    absl::StatusOr<std::vector<int>> first = PlaceGroups(sizes, cluster);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_THAT(*first, ElementsAre(0));
  }
}

TEST(PlaceGroupsTest, OneGpuPerNode) {
  // Every size is a multiple of a one-GPU node.
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/1);
  const std::vector<int> sizes = {1, 2, 1};
  absl::StatusOr<std::vector<int>> first = PlaceGroups(sizes, cluster);
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectLegalLayout(sizes, *first, cluster);
  EXPECT_THAT(*first, ElementsAre(2, 0, 3));
}

TEST(PlaceGroupsTest, SizesNotSummingToTheWorldAreRejected) {
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/2, /*gpus_per_node=*/8);
  for (const std::vector<int>& sizes :
       {std::vector<int>{8, 4}, std::vector<int>{8, 8, 1},
        std::vector<int>{}}) {
    absl::StatusOr<std::vector<int>> first = PlaceGroups(sizes, cluster);
    EXPECT_EQ(first.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(first.status().message(), HasSubstr("16"));
  }
  absl::StatusOr<std::vector<int>> short_by_four =
      PlaceGroups({8, 4}, cluster);
  EXPECT_THAT(short_by_four.status().message(), HasSubstr("sum to 12"));
}

TEST(PlaceGroupsTest, SizeThatDividesNoNodeIsRejectedByName) {
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/1, /*gpus_per_node=*/8);
  absl::StatusOr<std::vector<int>> first = PlaceGroups({3, 3, 2}, cluster);
  EXPECT_EQ(first.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(first.status().message(), HasSubstr("group of 3 GPUs"));
}

TEST(PlaceGroupsTest, SizeThatIsNotWholeNodesIsRejectedByName) {
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/2, /*gpus_per_node=*/8);
  absl::StatusOr<std::vector<int>> first = PlaceGroups({12, 4}, cluster);
  EXPECT_EQ(first.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(first.status().message(), HasSubstr("group of 12 GPUs"));
}

TEST(PlaceGroupsTest, NonPositiveSizeIsRejected) {
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/1, /*gpus_per_node=*/8);
  absl::StatusOr<std::vector<int>> first = PlaceGroups({8, 0}, cluster);
  EXPECT_EQ(first.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(first.status().message(), HasSubstr("group of 0 GPUs"));
}

TEST(PlaceGroupsTest, GroupOfMoreGpusThanTheWorldIsRejected) {
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/3, /*gpus_per_node=*/8);
  absl::StatusOr<std::vector<int>> fits = PlaceGroups({8, 16}, cluster);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_THAT(*fits, ElementsAre(16, 0));
  absl::StatusOr<std::vector<int>> too_big = PlaceGroups({32}, cluster);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(too_big.status().message(), HasSubstr("32"));
}

// Sizes that do not all divide each other (3 and 4 on 12-GPU nodes, legal
// for a model with 12 or 24 KV heads). A layout exists: node 0 holds 6 at
// rank 0 and the two 3s at ranks 6 and 9, node 1 the three 4s. The header
// promises FAILED_PRECONDITION only when the sizes cannot be laid out.
TEST(PlaceGroupsTest, SizesThatDoNotDivideEachOtherStillFitWhenPossible) {
  const ClusterSpec cluster =
      H200Cluster(/*num_nodes=*/2, /*gpus_per_node=*/12);
  const std::vector<int> sizes = {6, 4, 4, 4, 3, 3};
  absl::StatusOr<std::vector<int>> first = PlaceGroups(sizes, cluster);
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectLegalLayout(sizes, *first, cluster);
}

}  // namespace
}  // namespace dcp
