// The load test's client threads: phases of calls run on a pool of threads,
// each thread's log of latencies and failures merged after the phase, the
// latency rows they add up to, and the process measurements beside them.
// Internal to load_test_lib.

#ifndef DCP_PLANNER_SERVICE_LOAD_TEST_THREADS_H_
#define DCP_PLANNER_SERVICE_LOAD_TEST_THREADS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dcp/v1/planner_service.pb.h"
#include "planner/service/load_test.h"

namespace dcp {

/// Errors kept verbatim in the result (the rest are only counted).
inline constexpr size_t kMaxErrorsKept = 10;

/// CPU time of the calling thread and of the whole process.
double ThreadCpuSeconds();
double ProcessCpuSeconds();

/// The 1-minute load average from /proc/loadavg; -1 if unreadable.
double LoadAverage();

/// ESTABLISHED TCP connections in this network namespace whose remote port
/// is `port` (the client ends of connections to the planner); -1 if
/// unreadable.
int CountTcpConnectionsTo(int port);

struct CallRecord {
  absl::Time start;
  double ms = 0;
};

/// What one client thread saw in a phase; merged after the phase.
struct ThreadLog {
  std::vector<CallRecord> calls;
  /// Report phase: wall time of each worker's ReportStepStats calls.
  std::vector<double> per_worker_ms;
  int64_t failures = 0;
  std::vector<std::string> errors;
  std::vector<std::string> problems;
  double cpu_seconds = 0;
  /// Scratch for the GetPlan phase: this thread's request, made (its batch
  /// copied, if it carries one) once per phase: only worker_id changes
  /// between its calls, so that the simulated workers spend as little of
  /// the shared CPUs as they can.
  std::optional<v1::GetPlanRequest> get_plan_request;
  /// Without --decode-every-plan: the GetPlan response this thread decoded
  /// last, its PlanDigest and its bytes as received (a response equal to
  /// them is not decoded again).
  v1::GetPlanResponse response;
  size_t plan_digest = 0;
  std::string response_bytes;

  void Fail(absl::string_view what, const absl::Status& status) {
    ++failures;
    if (errors.size() < kMaxErrorsKept) {
      errors.push_back(absl::StrCat(what, ": ", status.ToString()));
    }
  }
};

struct Phase {
  ThreadLog merged;
  double wall_seconds = 0;
};

/// Runs `call` (returning absl::Status or absl::StatusOr) and records its
/// latency in `log` if it succeeds; returns what it returned.
template <typename Call>
auto TimedCall(ThreadLog& log, const Call& call) -> decltype(call()) {
  const absl::Time start = absl::Now();
  auto result = call();
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  if (result.ok()) log.calls.push_back({start, ms});
  return result;
}

/// Latencies of one row accumulated over phases.
struct LatencyRow {
  std::vector<double> ms;
  int64_t failures = 0;
  double wall_seconds = 0;
  /// Throughput is meaningful (not a subset of another row's calls).
  bool throughput = true;

  void Add(double call_ms) { ms.push_back(call_ms); }

  /// Sorts the latencies and sums them up as row `name`.
  RpcLatency Summarize(std::string name);
};

/// Adds what `log` saw to `all`.
void MergeLog(ThreadLog& all, ThreadLog log);

/// Runs `task(i, log)` for i in [0, tasks) on up to `threads` threads, each
/// taking the next task when done with one.
Phase RunPhase(int tasks, int threads,
               const std::function<void(int, ThreadLog&)>& task);

/// Adds phase `later`, run after `phase`, to it.
void MergePhase(Phase& phase, Phase later);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_LOAD_TEST_THREADS_H_
