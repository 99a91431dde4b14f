#include "launcher/local_job_test_support.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/test_files.h"
#include "launcher/child_process.h"

namespace dcp {

JobRun RunToEnd(const std::vector<std::string>& argv,
                const std::string& stderr_path, absl::Duration limit) {
  auto mutex = std::make_shared<absl::Mutex>();
  auto lines = std::make_shared<std::vector<std::string>>();
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(
      argv, stderr_path, [mutex, lines](const std::string& line) {
        absl::MutexLock lock(mutex.get());
        lines->push_back(line);
      });
  JobRun run;
  if (!child.ok()) {
    run.output = std::string(child.status().message());
    return run;
  }
  std::optional<int> code = (*child)->WaitFor(limit);
  run.exit_code = code.has_value() ? *code : (*child)->Kill();
  (*child)->JoinOutput();
  absl::MutexLock lock(mutex.get());
  run.lines = *lines;
  run.output = absl::StrCat(absl::StrJoin(run.lines, "\n"), "\n--- stderr:\n",
                            ReadTestFile(stderr_path));
  return run;
}

JobRun RunLocalJob(const std::string& dir,
                   const std::vector<std::string>& flags) {
  const std::vector<std::string> defaults = {
      "--nodes=1",
      "--ranks-per-node=2",
      "--workload=longtail:median=64,tail_fraction=0.05,tail_min=256,"
      "max=1024,min=16",
      "--global-batch-tokens=2048",
      "--timeout=3m",
      "--collective-timeout=60s"};
  std::vector<std::string> argv = {
      Runfile("launcher/dcp_local_job"),
      absl::StrCat("--planner-binary=", Runfile("planner/service/dcp_planner")),
      absl::StrCat("--worker-binary=", Runfile("worker/dcp_worker")),
      absl::StrCat("--work-dir=", dir)};
  for (const std::string& flag : defaults) {
    const std::string name = flag.substr(0, flag.find('=') + 1);
    bool replaced = false;
    for (const std::string& given : flags) {
      replaced = replaced || absl::StartsWith(given, name);
    }
    if (!replaced) argv.push_back(flag);
  }
  argv.insert(argv.end(), flags.begin(), flags.end());
  return RunToEnd(argv, absl::StrCat(dir, "/dcp_local_job.stderr"),
                  absl::Minutes(4));
}

}  // namespace dcp
