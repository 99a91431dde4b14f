// CreateC10dCommunicator over Gloo: multi-process cases run 4 ranks as child
// processes over loopback (see multiprocess_test_util.h); option checks run in
// the test process.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/torch.h"
#include "worker/communication/c10d_test_world.h"
#include "worker/communication/communicator.h"
#include "worker/communication/multiprocess_test_util.h"
#include "worker/libtorch_cuda.h"

namespace dcp {
namespace {

using ::dcp::testing::RankContext;

constexpr int kWorldSize = 4;
// Store rendezvous and group creation; generous for 4 processes loading
// LibTorch at once on a loaded 2-core machine.
constexpr absl::Duration kSetupTimeout = absl::Seconds(30);
constexpr absl::Duration kCallTimeout = absl::Seconds(20);
// Whole RunRanks call.
constexpr absl::Duration kRunTimeout = absl::Seconds(90);

absl::Status Check(bool condition, absl::string_view what) {
  if (condition) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("check failed: ", what));
}

absl::Status CheckTensor(const torch::Tensor& actual,
                         const torch::Tensor& expected,
                         absl::string_view what) {
  if (torch::equal(actual, expected)) return absl::OkStatus();
  std::ostringstream message;
  message << what << ": got\n" << actual << "\nwant\n" << expected;
  return absl::InternalError(message.str());
}

absl::Status CheckCode(const absl::Status& status, absl::StatusCode code,
                       absl::string_view what) {
  if (status.code() == code) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": want code ",
                                          absl::StatusCodeToString(code),
                                          ", got ", status.ToString()));
}

std::vector<int> AllRanks(int world_size) {
  std::vector<int> ranks;
  for (int r = 0; r < world_size; ++r) ranks.push_back(r);
  return ranks;
}

/// All-reduce and all-to-all over `group`, checked against what its members
/// (global ranks) must produce. `tag` keeps values distinct per call.
absl::Status CheckGroupCollectives(CommGroup& group, int tag) {
  const std::vector<int>& members = group.global_ranks();
  const int me = members[group.rank()];
  const std::string name =
      absl::StrCat("group {", absl::StrJoin(members, ","), "} tag ", tag);

  // Sum of (global rank + 1) * tag in every element.
  int64_t member_sum = 0;
  for (int member : members) member_sum += (member + 1) * tag;
  torch::Tensor summed = torch::full({5}, (me + 1) * tag, torch::kFloat64);
  DCP_RETURN_IF_ERROR(group.AllReduceSum(summed, kCallTimeout));
  DCP_RETURN_IF_ERROR(CheckTensor(summed,
                                  torch::full({5}, member_sum, torch::kFloat64),
                                  absl::StrCat("AllReduceSum on ", name)));

  // Element (chunk j, k) of member m's input is 1000*m + 10*j + k + tag, so
  // member i's output chunk j must be 1000*members[j] + 10*i + k + tag.
  const int n = group.size();
  torch::Tensor input = torch::empty({n, 3}, torch::kInt64);
  torch::Tensor expected = torch::empty({n, 3}, torch::kInt64);
  for (int j = 0; j < n; ++j) {
    for (int k = 0; k < 3; ++k) {
      input[j][k] = 1000 * me + 10 * j + k + tag;
      expected[j][k] = 1000 * members[j] + 10 * group.rank() + k + tag;
    }
  }
  torch::Tensor output = torch::zeros({n, 3}, torch::kInt64);
  DCP_RETURN_IF_ERROR(group.AllToAll(input, output, kCallTimeout));
  DCP_RETURN_IF_ERROR(
      CheckTensor(output, expected, absl::StrCat("AllToAll on ", name)));

  // Reduce-scatter in float32: member m contributes (m + 1) * (index + tag)
  // to every element, so member i's chunk [2i, 2i+2) sums to
  // member_sum / tag * (index + tag).
  const double rank_weight_sum = static_cast<double>(member_sum) / tag;
  torch::Tensor index = torch::arange(2 * n, torch::kFloat32);
  torch::Tensor scatter_input = (index + tag) * (me + 1);
  torch::Tensor scattered = torch::zeros({2}, torch::kFloat32);
  DCP_RETURN_IF_ERROR(
      group.ReduceScatterSum(scatter_input, scattered, kCallTimeout));
  DCP_RETURN_IF_ERROR(CheckTensor(
      scattered, (index.narrow(0, 2 * group.rank(), 2) + tag) * rank_weight_sum,
      absl::StrCat("ReduceScatterSum on ", name)));

  // All-gather of bfloat16 (the ZeRO-1 weights): chunk j is member j's.
  torch::Tensor mine =
      torch::full({2, 3}, members[group.rank()] + tag, torch::kBFloat16);
  torch::Tensor gathered = torch::zeros({2 * n, 3}, torch::kBFloat16);
  DCP_RETURN_IF_ERROR(group.AllGather(mine, gathered, kCallTimeout));
  torch::Tensor expected_gather = torch::empty({2 * n, 3}, torch::kBFloat16);
  for (int j = 0; j < n; ++j) {
    expected_gather.narrow(0, 2 * j, 2).fill_(members[j] + tag);
  }
  DCP_RETURN_IF_ERROR(CheckTensor(gathered, expected_gather,
                                  absl::StrCat("AllGather on ", name)));
  // Mismatched shapes fail locally.
  torch::Tensor wrong = torch::zeros({3}, torch::kFloat32);
  return CheckCode(
      group.ReduceScatterSum(scatter_input, wrong, kCallTimeout),
      absl::StatusCode::kInvalidArgument,
      absl::StrCat("ReduceScatterSum into a wrong chunk on ", name));
}

// World all-reduce and all-to-all, a strided all-reduce, and argument checks
// that fail locally without disturbing the group.
DCP_RANK_MAIN(WorldCollectives) {
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      ::dcp::testing::JoinC10dTestWorld(context, "world_collectives",
                                        kSetupTimeout);
  DCP_RETURN_IF_ERROR(communicator.status());
  Communicator& comm = **communicator;
  CommGroup& world = comm.World();
  DCP_RETURN_IF_ERROR(Check(comm.rank() == context.rank, "comm.rank()"));
  DCP_RETURN_IF_ERROR(Check(comm.world_size() == kWorldSize, "world_size()"));
  DCP_RETURN_IF_ERROR(Check(world.rank() == context.rank, "World().rank()"));
  DCP_RETURN_IF_ERROR(Check(world.size() == kWorldSize, "World().size()"));
  DCP_RETURN_IF_ERROR(Check(world.global_ranks() == AllRanks(kWorldSize),
                            "World().global_ranks()"));
  DCP_RETURN_IF_ERROR(Check(comm.groups_created() == 1, "groups_created()"));

  DCP_RETURN_IF_ERROR(CheckGroupCollectives(world, /*tag=*/1));

  // arange(3) + 10 * rank summed over ranks 0..3.
  torch::Tensor values = torch::arange(3, torch::kFloat32) + 10 * context.rank;
  DCP_RETURN_IF_ERROR(world.AllReduceSum(values, kCallTimeout));
  DCP_RETURN_IF_ERROR(CheckTensor(
      values, torch::arange(3, torch::kFloat32) * 4 + 60, "float all-reduce"));

  // A transposed (non-contiguous) tensor is reduced in place all the same.
  torch::Tensor base = torch::full({2, 3}, context.rank + 1, torch::kFloat32);
  torch::Tensor strided = base.t();
  DCP_RETURN_IF_ERROR(world.AllReduceSum(strided, kCallTimeout));
  DCP_RETURN_IF_ERROR(CheckTensor(base, torch::full({2, 3}, 10.0f),
                                  "strided all-reduce (through its base)"));

  DCP_RETURN_IF_ERROR(world.Barrier(kCallTimeout));

  // Local argument errors: no collective starts, so the group stays usable.
  torch::Tensor uneven = torch::zeros({3, 2});
  torch::Tensor uneven_out = torch::zeros({3, 2});
  DCP_RETURN_IF_ERROR(
      CheckCode(world.AllToAll(uneven, uneven_out, kCallTimeout),
                absl::StatusCode::kInvalidArgument, "AllToAll of 3 rows"));
  torch::Tensor input = torch::zeros({4, 2});
  torch::Tensor wrong_dtype = torch::zeros({4, 2}, torch::kInt64);
  DCP_RETURN_IF_ERROR(
      CheckCode(world.AllToAll(input, wrong_dtype, kCallTimeout),
                absl::StatusCode::kInvalidArgument, "AllToAll dtype mismatch"));
  DCP_RETURN_IF_ERROR(CheckCode(
      world.AllReduceSum(values, absl::ZeroDuration()),
      absl::StatusCode::kInvalidArgument, "AllReduceSum with zero timeout"));

  // Invalid member lists, checked locally on every rank.
  const int other = (context.rank + 1) % kWorldSize;
  const std::vector<std::vector<int>> invalid = {
      {},                            // Empty.
      {context.rank, kWorldSize},    // Out of range.
      {-1, context.rank},            // Negative.
      {context.rank, context.rank},  // Repeated.
      {std::max(context.rank, other), std::min(context.rank, other)},  // Order.
      {other},  // Without this rank.
  };
  for (const std::vector<int>& ranks : invalid) {
    DCP_RETURN_IF_ERROR(CheckCode(
        comm.Group(ranks).status(), absl::StatusCode::kInvalidArgument,
        absl::StrCat("Group({", absl::StrJoin(ranks, ","), "})")));
  }
  DCP_RETURN_IF_ERROR(
      Check(comm.groups_created() == 1, "groups_created() after bad Group()"));

  // The world still works after all that.
  return CheckGroupCollectives(world, /*tag=*/2);
}

// Disjoint pairs at the same time, the world as a group, then {0,2} while
// ranks 1 and 3 use {1,3} (never touching {0,2}), and the cache.
DCP_RANK_MAIN(SubGroups) {
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      ::dcp::testing::JoinC10dTestWorld(context, "sub_groups", kSetupTimeout);
  DCP_RETURN_IF_ERROR(communicator.status());
  Communicator& comm = **communicator;
  const int rank = context.rank;

  // {0,1} and {2,3} concurrently; their sums differ (3 vs 7 per tag).
  const std::vector<int> pair =
      rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
  absl::StatusOr<CommGroup*> pair_group = comm.Group(pair);
  DCP_RETURN_IF_ERROR(pair_group.status());
  DCP_RETURN_IF_ERROR(Check((*pair_group)->rank() == rank % 2, "pair rank()"));
  DCP_RETURN_IF_ERROR(Check((*pair_group)->size() == 2, "pair size()"));
  DCP_RETURN_IF_ERROR(
      Check((*pair_group)->global_ranks() == pair, "pair global_ranks()"));
  DCP_RETURN_IF_ERROR(CheckGroupCollectives(**pair_group, /*tag=*/3));
  DCP_RETURN_IF_ERROR(Check(comm.groups_created() == 2, "after pair"));

  // All ranks as a group is the world, not a new group.
  absl::StatusOr<CommGroup*> everyone = comm.Group(AllRanks(kWorldSize));
  DCP_RETURN_IF_ERROR(everyone.status());
  DCP_RETURN_IF_ERROR(Check(*everyone == &comm.World(), "Group(all) is World"));
  DCP_RETURN_IF_ERROR(Check(comm.groups_created() == 2, "after Group(all)"));
  DCP_RETURN_IF_ERROR(CheckGroupCollectives(**everyone, /*tag=*/4));

  // {0,2} on its members only; 1 and 3 meanwhile use {1,3}.
  const std::vector<int> odd_even =
      rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
  absl::StatusOr<CommGroup*> strided = comm.Group(odd_even);
  DCP_RETURN_IF_ERROR(strided.status());
  DCP_RETURN_IF_ERROR(CheckGroupCollectives(**strided, /*tag=*/5));
  DCP_RETURN_IF_ERROR(Check(comm.groups_created() == 3, "after {0,2}/{1,3}"));

  // Cached: the same object, nothing created, still usable, in any order.
  absl::StatusOr<CommGroup*> strided_again = comm.Group(odd_even);
  DCP_RETURN_IF_ERROR(strided_again.status());
  DCP_RETURN_IF_ERROR(Check(*strided_again == *strided, "cached group"));
  absl::StatusOr<CommGroup*> pair_again = comm.Group(pair);
  DCP_RETURN_IF_ERROR(pair_again.status());
  DCP_RETURN_IF_ERROR(Check(*pair_again == *pair_group, "cached pair"));
  DCP_RETURN_IF_ERROR(Check(comm.groups_created() == 3, "after cache hits"));
  DCP_RETURN_IF_ERROR(CheckGroupCollectives(**pair_again, /*tag=*/6));
  DCP_RETURN_IF_ERROR(CheckGroupCollectives(**strided_again, /*tag=*/7));
  return comm.World().Barrier(kCallTimeout);
}

// With max_cached_groups = 1, three steps of two groups each: pairs, then
// strided pairs, then the pairs again. Each rank holds the world and one
// sub-group at most; a released group is created again (fresh store keys)
// and works; without UseGroups the cache is unbounded as before.
DCP_RANK_MAIN(BoundedGroupCache) {
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      ::dcp::testing::JoinC10dTestWorld(context, "bounded_cache", kSetupTimeout,
                                        /*max_cached_groups=*/1);
  DCP_RETURN_IF_ERROR(communicator.status());
  Communicator& comm = **communicator;
  const int rank = context.rank;
  const std::vector<std::vector<int>> pairs = {{0, 1}, {2, 3}};
  const std::vector<std::vector<int>> strided = {{0, 2}, {1, 3}};
  const std::vector<std::vector<std::vector<int>>> steps = {pairs, strided,
                                                            pairs};
  for (size_t step = 0; step < steps.size(); ++step) {
    DCP_RETURN_IF_ERROR(comm.UseGroups(steps[step]));
    const std::vector<int>& mine =
        std::binary_search(steps[step][0].begin(), steps[step][0].end(), rank)
            ? steps[step][0]
            : steps[step][1];
    absl::StatusOr<CommGroup*> group = comm.Group(mine);
    DCP_RETURN_IF_ERROR(group.status());
    DCP_RETURN_IF_ERROR(
        CheckGroupCollectives(**group, /*tag=*/10 + static_cast<int>(step)));
    DCP_RETURN_IF_ERROR(
        Check(comm.groups_held() == 2,
              absl::StrCat("step ", step, ": holds ", comm.groups_held(),
                           " groups; the bound allows the world and 1")));
    DCP_RETURN_IF_ERROR(Check(
        comm.groups_created() == 2 + static_cast<int>(step),
        absl::StrCat("step ", step, ": created ", comm.groups_created())));
  }
  // A step whose groups are all cached releases nothing.
  DCP_RETURN_IF_ERROR(comm.UseGroups(pairs));
  DCP_RETURN_IF_ERROR(Check(comm.groups_held() == 2, "repeated step"));
  DCP_RETURN_IF_ERROR(Check(comm.groups_created() == 4, "no re-creation"));
  return comm.World().Barrier(kCallTimeout);
}

// With max_cached_groups = 2, steps over many different partitions of the
// 4 ranks (pairs of every kind, singles, triples, in a changing order):
// after every step each rank holds the world and at most 2 sub-groups,
// although it uses far more distinct groups over the steps, and every group
// it uses (cached or created again) works.
DCP_RANK_MAIN(ManyGroupsStayWithinTheBound) {
  constexpr int kBound = 2;
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      ::dcp::testing::JoinC10dTestWorld(context, "many_groups", kSetupTimeout,
                                        /*max_cached_groups=*/kBound);
  DCP_RETURN_IF_ERROR(communicator.status());
  Communicator& comm = **communicator;
  const int rank = context.rank;
  using Partition = std::vector<std::vector<int>>;
  const std::vector<Partition> partitions = {
      {{0, 1}, {2, 3}},       {{0, 2}, {1, 3}},      {{0, 3}, {1, 2}},
      {{0}, {1}, {2}, {3}},   {{0}, {1, 2, 3}},      {{0, 1, 2}, {3}},
      {{0, 1}, {2}, {3}},     {{0}, {1, 3}, {2}},    {{0, 2, 3}, {1}},
      {{0, 1, 3}, {2}},       {{0, 3}, {1}, {2}},    {{0}, {1}, {2, 3}}};
  int max_held = 0;
  for (int step = 0; step < 3 * static_cast<int>(partitions.size()); ++step) {
    // A different order on each pass, the same on every rank.
    const Partition& groups =
        partitions[(step * 5 + step / 12) % partitions.size()];
    DCP_RETURN_IF_ERROR(comm.UseGroups(groups));
    const std::vector<int>* mine = nullptr;
    for (const std::vector<int>& group : groups) {
      if (std::binary_search(group.begin(), group.end(), rank)) mine = &group;
    }
    DCP_RETURN_IF_ERROR(Check(mine != nullptr, "rank in no group"));
    absl::StatusOr<CommGroup*> group = comm.Group(*mine);
    DCP_RETURN_IF_ERROR(group.status());
    DCP_RETURN_IF_ERROR(CheckGroupCollectives(**group, /*tag=*/100 + step));
    max_held = std::max(max_held, comm.groups_held());
    DCP_RETURN_IF_ERROR(Check(
        comm.groups_held() <= 1 + kBound,
        absl::StrCat("step ", step, ": holds ", comm.groups_held(),
                     " groups; the bound allows the world and ", kBound)));
  }
  DCP_RETURN_IF_ERROR(Check(max_held == 1 + kBound, "the bound was reached"));
  // Far more groups were used (and created) than the bound keeps.
  DCP_RETURN_IF_ERROR(Check(
      comm.groups_created() > 1 + 3 * kBound,
      absl::StrCat("created only ", comm.groups_created(), " groups")));
  return comm.World().Barrier(kCallTimeout);
}

// How long rank 3 stays away from the world all-reduce; longer than
// kMissingCallTimeout plus scheduling slack, so the others time out first.
constexpr absl::Duration kMissingCallTimeout = absl::Seconds(2);
constexpr absl::Duration kAbsentFor = absl::Seconds(5);

// Ranks 0-2 all-reduce over the world; rank 3 never joins (it sleeps, then
// exits). The others must fail with DEADLINE_EXCEEDED close to the timeout,
// and the group must then refuse further calls instead of hanging.
DCP_RANK_MAIN(MissingMember) {
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      ::dcp::testing::JoinC10dTestWorld(context, "missing_member",
                                        kSetupTimeout);
  DCP_RETURN_IF_ERROR(communicator.status());
  CommGroup& world = (*communicator)->World();
  if (context.rank == kWorldSize - 1) {
    absl::SleepFor(kAbsentFor);
    return absl::OkStatus();
  }
  torch::Tensor tensor = torch::ones({4});
  const absl::Time start = absl::Now();
  const absl::Status status = world.AllReduceSum(tensor, kMissingCallTimeout);
  const absl::Duration waited = absl::Now() - start;
  DCP_RETURN_IF_ERROR(CheckCode(status, absl::StatusCode::kDeadlineExceeded,
                                "all-reduce without rank 3"));
  std::fprintf(stderr,
               "[rank %d] all-reduce without rank 3 failed after %s: %s\n",
               context.rank, absl::FormatDuration(waited).c_str(),
               status.ToString().c_str());
  DCP_RETURN_IF_ERROR(
      Check(waited >= kMissingCallTimeout - absl::Milliseconds(50),
            "returned before the timeout"));
  DCP_RETURN_IF_ERROR(Check(
      waited < kMissingCallTimeout + absl::Seconds(2),
      absl::StrCat("returned only after ", absl::FormatDuration(waited))));
  return CheckCode(world.Barrier(kMissingCallTimeout),
                   absl::StatusCode::kFailedPrecondition,
                   "barrier after a timed-out all-reduce");
}

void ExpectAllRanksPass(absl::string_view rank_main) {
  const absl::Time start = absl::Now();
  EXPECT_TRUE(
      ::dcp::testing::EveryRankSucceeded(kWorldSize, kRunTimeout, rank_main));
  std::fprintf(stderr, "%s: %d ranks done in %s\n",
               std::string(rank_main).c_str(), kWorldSize,
               absl::FormatDuration(absl::Now() - start).c_str());
}

TEST(C10dCommunicatorTest, WorldAllReduceAndAllToAll) {
  ExpectAllRanksPass("WorldCollectives");
}

TEST(C10dCommunicatorTest, SubGroupsAreConcurrentCachedAndMembersOnly) {
  ExpectAllRanksPass("SubGroups");
}

TEST(C10dCommunicatorTest, GroupCacheBoundReleasesLeastRecentlyUsedAlike) {
  ExpectAllRanksPass("BoundedGroupCache");
}

TEST(C10dCommunicatorTest, DefaultBoundIsTheNcclOneAndUnboundedOnGloo) {
  EXPECT_EQ(MaxCachedGroupsFor("nccl", /*requested=*/-1),
            kDefaultNcclMaxCachedGroups);
  EXPECT_EQ(MaxCachedGroupsFor("gloo", /*requested=*/-1), 0);
  EXPECT_EQ(MaxCachedGroupsFor("nccl", /*requested=*/2), 2);
  EXPECT_EQ(MaxCachedGroupsFor("gloo", /*requested=*/5), 5);
}

TEST(C10dCommunicatorTest, ManyDifferentGroupsNeverExceedTheBound) {
  ExpectAllRanksPass("ManyGroupsStayWithinTheBound");
}

TEST(C10dCommunicatorTest, MissingMemberFailsWithinTimeoutInsteadOfHanging) {
  const absl::Time start = absl::Now();
  ExpectAllRanksPass("MissingMember");
  // Setup, the 2 s timeout, rank 3's 5 s absence and teardown; far below the
  // 30 s Gloo timeout a hung in-flight collective would wait for.
  EXPECT_LT(absl::Now() - start, absl::Seconds(25));
}

TEST(C10dCommunicatorTest, SingleRankWorldOnChosenPort) {
  int published_port = 0;
  C10dOptions options;
  options.timeout = absl::Seconds(10);
  options.on_store_listening = [&](int port) {
    published_port = port;
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      CreateC10dCommunicator(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_GT(published_port, 0);
  EXPECT_EQ((*comm)->world_size(), 1);
  EXPECT_EQ((*comm)->groups_created(), 1);
  torch::Tensor tensor = torch::arange(4, torch::kFloat32);
  ASSERT_TRUE((*comm)->World().AllReduceSum(tensor, absl::Seconds(5)).ok());
  EXPECT_TRUE(torch::equal(tensor, torch::arange(4, torch::kFloat32)));
  absl::StatusOr<CommGroup*> self = (*comm)->Group({0});
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_EQ(*self, &(*comm)->World());
}

TEST(C10dCommunicatorTest, PublishErrorAbortsCreation) {
  C10dOptions options;
  options.timeout = absl::Seconds(10);
  options.on_store_listening = [](int) {
    return absl::InternalError("cannot publish");
  };
  EXPECT_EQ(CreateC10dCommunicator(options).status().code(),
            absl::StatusCode::kInternal);
}

TEST(C10dCommunicatorTest, NcclWithoutCudaIsUnimplemented) {
#if DCP_LIBTORCH_HAS_CUDA
  GTEST_SKIP() << "this LibTorch has CUDA; NCCL needs GPUs to be tested";
#else
  C10dOptions options;
  options.backend = "nccl";
  absl::Status status = CreateC10dCommunicator(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("--backend=gloo"));
#endif
}

TEST(C10dCommunicatorTest, InvalidOptions) {
  auto code_of = [](C10dOptions options) {
    return CreateC10dCommunicator(options).status().code();
  };
  C10dOptions options;
  options.world_size = 0;
  EXPECT_EQ(code_of(options), absl::StatusCode::kInvalidArgument);
  options = C10dOptions();
  options.world_size = 2;
  options.rank = 2;
  EXPECT_EQ(code_of(options), absl::StatusCode::kInvalidArgument);
  options.rank = 1;  // Needs rank 0's port.
  EXPECT_EQ(code_of(options), absl::StatusCode::kInvalidArgument);
  options = C10dOptions();
  options.backend = "mpi";
  EXPECT_EQ(code_of(options), absl::StatusCode::kInvalidArgument);
  options = C10dOptions();
  options.timeout = absl::ZeroDuration();
  EXPECT_EQ(code_of(options), absl::StatusCode::kInvalidArgument);
  options.timeout = absl::InfiniteDuration();
  EXPECT_EQ(code_of(options), absl::StatusCode::kInvalidArgument);
  options = C10dOptions();
  options.store_port = 70000;
  EXPECT_EQ(code_of(options), absl::StatusCode::kInvalidArgument);
  options = C10dOptions();
  options.max_cached_groups = -1;
  EXPECT_EQ(code_of(options), absl::StatusCode::kInvalidArgument);
}

TEST(C10dCommunicatorTest, UnreachableStoreIsUnavailable) {
  // A port bound but not listening: connections are refused, and nobody else
  // can take the port while this socket holds it.
  const int holder = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ASSERT_EQ(
      bind(holder, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(holder, reinterpret_cast<sockaddr*>(&address), &length),
            0);

  C10dOptions options;
  options.world_size = 2;
  options.rank = 1;
  options.store_port = ntohs(address.sin_port);
  // The TCPStore client retries refused connections until the timeout.
  options.timeout = absl::Seconds(3);
  const absl::Time start = absl::Now();
  absl::Status status = CreateC10dCommunicator(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  std::fprintf(stderr, "after %s: %s\n",
               absl::FormatDuration(absl::Now() - start).c_str(),
               status.ToString().c_str());
  // It retried (a worker may start before rank 0 listens on a fixed port).
  EXPECT_GE(absl::Now() - start, absl::Seconds(1));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  close(holder);
}

}  // namespace
}  // namespace dcp
