#include "planner/service/load_test_threads.h"

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/percentile.h"

namespace dcp {

double ThreadCpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return now.tv_sec + 1e-9 * now.tv_nsec;
}

double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + 1e-6 * usage.ru_utime.tv_usec +
         usage.ru_stime.tv_sec + 1e-6 * usage.ru_stime.tv_usec;
}

/// The 1-minute load average from /proc/loadavg; -1 if unreadable.
double LoadAverage() {
  std::ifstream file("/proc/loadavg");
  double load = -1;
  if (!(file >> load)) return -1;
  return load;
}

/// ESTABLISHED TCP connections in this network namespace whose remote port
/// is `port` (the client ends of connections to the planner); -1 if
/// unreadable.
int CountTcpConnectionsTo(int port) {
  int count = 0;
  bool readable = false;
  for (const char* path : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream file(path);
    if (!file) continue;
    readable = true;
    std::string line;
    std::getline(file, line);  // header
    while (std::getline(file, line)) {
      std::vector<absl::string_view> fields =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      // sl local_address rem_address st ...
      if (fields.size() < 4 || fields[3] != "01") continue;
      const size_t colon = fields[2].rfind(':');
      uint32_t remote_port = 0;
      if (colon != absl::string_view::npos &&
          absl::SimpleHexAtoi(fields[2].substr(colon + 1), &remote_port) &&
          static_cast<int>(remote_port) == port) {
        ++count;
      }
    }
  }
  return readable ? count : -1;
}

/// Adds what `log` saw to `all`.
void MergeLog(ThreadLog& all, ThreadLog log) {
  all.calls.insert(all.calls.end(), log.calls.begin(), log.calls.end());
  all.per_worker_ms.insert(all.per_worker_ms.end(), log.per_worker_ms.begin(),
                           log.per_worker_ms.end());
  all.failures += log.failures;
  for (std::string& error : log.errors) {
    if (all.errors.size() < kMaxErrorsKept) {
      all.errors.push_back(std::move(error));
    }
  }
  for (std::string& problem : log.problems) {
    all.problems.push_back(std::move(problem));
  }
  all.cpu_seconds += log.cpu_seconds;
}

/// Runs `task(i, log)` for i in [0, tasks) on up to `threads` threads, each
/// taking the next task when done with one.
Phase RunPhase(int tasks, int threads,
               const std::function<void(int, ThreadLog&)>& task) {
  if (tasks <= 0) return Phase();
  const int num_threads = std::max(1, std::min(threads, tasks));
  std::vector<ThreadLog> logs(num_threads);
  std::atomic<int> next{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> pool;
  pool.reserve(num_threads);
  for (int t = 0; t < num_threads; ++t) {
    pool.emplace_back([&, t] {
      ThreadLog& log = logs[t];
      const double cpu_start = ThreadCpuSeconds();
      for (int i = next.fetch_add(1); i < tasks; i = next.fetch_add(1)) {
        task(i, log);
      }
      log.cpu_seconds = ThreadCpuSeconds() - cpu_start;
    });
  }
  for (std::thread& thread : pool) thread.join();
  Phase phase;
  phase.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (ThreadLog& log : logs) MergeLog(phase.merged, std::move(log));
  return phase;
}

/// Adds phase `later`, run after `phase`, to it.
void MergePhase(Phase& phase, Phase later) {
  phase.wall_seconds += later.wall_seconds;
  MergeLog(phase.merged, std::move(later.merged));
}

RpcLatency LatencyRow::Summarize(std::string name) {
  RpcLatency summary;
  summary.name = std::move(name);
  std::sort(ms.begin(), ms.end());
  summary.calls = static_cast<int64_t>(ms.size()) + failures;
  summary.failures = failures;
  if (throughput && wall_seconds > 0) {
    summary.calls_per_second = summary.calls / wall_seconds;
  }
  double sum = 0;
  for (double value : ms) sum += value;
  summary.mean_ms = ms.empty() ? 0 : sum / ms.size();
  summary.p50_ms = Percentile(ms, 0.50);
  summary.p99_ms = Percentile(ms, 0.99);
  summary.max_ms = ms.empty() ? 0 : ms.back();
  return summary;
}

}  // namespace dcp
