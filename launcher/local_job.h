#ifndef DCP_LAUNCHER_LOCAL_JOB_H_
#define DCP_LAUNCHER_LOCAL_JOB_H_

#include "common/main_prologue.h"

namespace dcp {

/// The `dcp_local_job` process (run `dcp_local_job --help` for the flags): a
/// whole DCP training job on 127.0.0.1. Starts the real `dcp_planner`
/// (reading its port from its "listening on" line) with a small CPU cluster
/// (nodes x ranks per node, a per-rank memory budget that makes long
/// sequences need SP 2 or recompute), then one `dcp_worker` process per
/// rank: profiling, then the steps with the planner's plans; then, with the
/// same batches, the static bucket plans. It forwards rank 0's lines (the fit
/// and one line per step) and ends with the measured mean step time of both,
/// the measured speedup and the cost model's error over the dcp steps.
/// Processes' stderr goes to log files in the work directory; a failing
/// process's log tail is printed. Any failure or the timeout kills every
/// process (none is left behind) and returns kExitFailure (kExitUsageError for
/// a bad command line or a binary not found). SIGINT or SIGTERM asks the
/// workers to stop at a step boundary (they checkpoint), then stops the
/// planner. Fault drills: --sigterm-after-step signals the workers;
/// --restart-planner-after-step stops the planner (SIGKILL or SIGTERM) and
/// restarts it on the same port and --state-dir after --planner-down-for,
/// while the workers wait for it. Call from main() before starting other
/// threads.
int RunLocalJobMain(int argc, char** argv);

}  // namespace dcp

#endif  // DCP_LAUNCHER_LOCAL_JOB_H_
