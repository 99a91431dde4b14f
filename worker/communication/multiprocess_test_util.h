#ifndef DCP_WORKER_COMMUNICATION_MULTIPROCESS_TEST_UTIL_H_
#define DCP_WORKER_COMMUNICATION_MULTIPROCESS_TEST_UTIL_H_

// Multi-process tests in one GoogleTest binary: a test starts N copies of its
// own binary, one per rank, over loopback, and checks how they exit.
//
// Each rank is a fresh process made by re-executing /proc/self/exe (never a
// bare fork(): LibTorch and Gloo start threads, which a forked child would
// lack). The child runs a *rank main*, a function registered by name at static
// initialisation, and exits with 0 when it returns OK, else 1 after printing
// the status to stderr. Nothing else of the test binary runs in the child.
//
// Example (a c10d all-reduce over 4 ranks):
//
//   DCP_RANK_MAIN(AllReduceOverFour) {   // `context` is the RankContext.
//     dcp::C10dOptions options;
//     options.rank = context.rank;
//     options.world_size = context.world_size;
//     options.store_prefix = "all_reduce";
//     if (context.rank == 0) {
//       options.on_store_listening = dcp::testing::PublishStorePort;
//     } else {
//       absl::StatusOr<int> port =
//           dcp::testing::AwaitStorePort(absl::Seconds(30));
//       if (!port.ok()) return port.status();
//       options.store_port = *port;
//     }
//     ...  // Create the communicator, run collectives, compare results.
//     return absl::OkStatus();           // Or an error saying what differed.
//   }
//
//   TEST(MyTest, AllReduce) {
//     EXPECT_TRUE(dcp::testing::EveryRankSucceeded(4, absl::Seconds(60),
//                                                  "AllReduceOverFour"));
//   }
//
// How the child gets there: RunRanks starts each child with the current
// test's --gtest_filter and environment variables naming the rank main, its
// rank, the world size and a per-call scratch folder. This library registers
// a GoogleTest global environment whose SetUp() (run by RUN_ALL_TESTS before
// any test) sees those variables, runs the rank main and exits. A binary
// without GoogleTest's main calls RunRankMainIfChild() first thing in main().
//
// Ports: rank 0 binds its TCPStore to port 0 (the system picks a free one)
// and calls PublishStorePort(port); the other ranks block in AwaitStorePort()
// until the port appears in the call's scratch folder. No port is guessed.
//
// Output: the children inherit the test's stdout/stderr, so their messages
// appear in the test log, each line of a failure prefixed with "[rank N]".

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dcp {
namespace testing {

/// What a rank main is told about its process.
struct RankContext {
  /// 0 .. world_size - 1.
  int rank = 0;
  int world_size = 1;
  /// The `arg` given to RunRanks (e.g. a case name or a small config).
  std::string arg;
  /// A folder shared by all ranks of this RunRanks call, for files the ranks
  /// exchange; removed by RunRanks afterwards.
  std::string scratch_dir;
};

/// The body of one rank. OK means this rank passed.
using RankMain = std::function<absl::Status(const RankContext& context)>;

/// Registers `rank_main` under `name` (unique in the binary); returns true so
/// that it can initialise a static. Prefer DCP_RANK_MAIN.
bool RegisterRankMain(const std::string& name, RankMain rank_main);

/// Starts `world_size` child processes running the rank main `name`, one per
/// rank, and waits for all of them to exit. Returns their exit codes by rank
/// (0: the rank main returned OK; 1: it returned an error, printed to stderr;
/// 2: this library failed in the child, e.g. an unknown `name`;
/// 128 + N: killed by signal N). Returns DEADLINE_EXCEEDED, after killing the
/// children still running (SIGKILL), when they have not all exited within
/// `timeout`; INVALID_ARGUMENT for world_size < 1 or an unregistered name;
/// FAILED_PRECONDITION when called inside a child; INTERNAL when a process
/// cannot be started. Children are killed if the calling process dies.
/// Blocks; call from the test's thread. Each call gets a fresh scratch folder
/// under $TEST_TMPDIR (else /tmp).
absl::StatusOr<std::vector<int>> RunRanks(int world_size,
                                          absl::Duration timeout,
                                          absl::string_view name,
                                          absl::string_view arg = "");

/// RunRanks, as a GoogleTest assertion: success when it ran and every rank
/// exited 0; otherwise a failure with RunRanks' error or the exit codes by
/// rank (the children's stderr, in the test log, says why). For
/// EXPECT_TRUE / ASSERT_TRUE.
::testing::AssertionResult EveryRankSucceeded(int world_size,
                                              absl::Duration timeout,
                                              absl::string_view name,
                                              absl::string_view arg = "");

/// For rank 0: makes `port` known to the other ranks of this RunRanks call
/// (written atomically to the scratch folder). Has the signature of
/// C10dOptions::on_store_listening. FAILED_PRECONDITION outside a child.
absl::Status PublishStorePort(int port);

/// For ranks other than 0: waits until rank 0 has published its port and
/// returns it; DEADLINE_EXCEEDED after `timeout`. FAILED_PRECONDITION outside
/// a child.
absl::StatusOr<int> AwaitStorePort(absl::Duration timeout);

/// Whether this process is a child started by RunRanks.
bool IsRankChild();

/// In a child started by RunRanks: runs its rank main and exits the process
/// (never returns). Elsewhere: returns at once. Called automatically before
/// the first test when linked with GoogleTest (see above).
void RunRankMainIfChild();

}  // namespace testing
}  // namespace dcp

/// Defines and registers a rank main called `name` (an identifier) whose body
/// follows; the body sees `const RankContext& context` and returns
/// absl::Status. Use at namespace scope in a test file.
#define DCP_RANK_MAIN(name)                                            \
  static ::absl::Status DcpRankMain_##name(                            \
      const ::dcp::testing::RankContext& context);                     \
  static const bool dcp_rank_main_registered_##name [[maybe_unused]] = \
      ::dcp::testing::RegisterRankMain(#name, &DcpRankMain_##name);    \
  static ::absl::Status DcpRankMain_##name(                            \
      [[maybe_unused]] const ::dcp::testing::RankContext& context)

#endif  // DCP_WORKER_COMMUNICATION_MULTIPROCESS_TEST_UTIL_H_
