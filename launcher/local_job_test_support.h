#ifndef DCP_LAUNCHER_LOCAL_JOB_TEST_SUPPORT_H_
#define DCP_LAUNCHER_LOCAL_JOB_TEST_SUPPORT_H_

// What the end-to-end tests of dcp_local_job share: running a binary or a
// small job to its end (runfiles and scratch files: common/test_files.h).
// testonly.

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dcp {

/// How a process run to its end ended.
struct JobRun {
  /// -1 when the process could not be started.
  int exit_code = -1;
  /// Its stdout, line by line.
  std::vector<std::string> lines;
  /// Its stdout lines joined and its stderr (or why it could not be
  /// started), for failure messages.
  std::string output;
};

/// Runs `argv` (argv[0] a path) to its end, SIGKILLed after `limit`, its
/// stderr appended to the file at `stderr_path`.
JobRun RunToEnd(const std::vector<std::string>& argv,
                const std::string& stderr_path, absl::Duration limit);

/// Runs dcp_local_job on two ranks of one node with `flags` (after the
/// defaults of a small job, which a flag of the same name in `flags`
/// replaces) and its work directory in `dir`, for at most 4 minutes.
JobRun RunLocalJob(const std::string& dir,
                   const std::vector<std::string>& flags);

}  // namespace dcp

#endif  // DCP_LAUNCHER_LOCAL_JOB_TEST_SUPPORT_H_
