#ifndef DCP_PLANNER_SERVICE_PLANNER_MAIN_LIB_H_
#define DCP_PLANNER_SERVICE_PLANNER_MAIN_LIB_H_

#include "common/main_prologue.h"

namespace dcp {

/// The `dcp_planner` process (run `dcp_planner --help` for the flags): starts
/// a PlannerServer, prints "dcp_planner listening on HOST:PORT, metrics on
/// HOST:PORT" to stdout, logs the handler's lines (one per planned step) to
/// stderr with a UTC timestamp, and on SIGTERM or SIGINT drains the calls in
/// flight and returns kExitOk. Returns kExitUsageError (common/main_prologue.h)
/// when the command line was wrong (unknown flag, bad value, unreadable file)
/// and kExitFailure when the planner could not start (handler state,
/// unbindable address, ...). Blocks SIGTERM and SIGINT in the
/// calling thread (and the threads it starts) to wait for them; call it from
/// main() before starting other threads. `argv[0]` is the program name.
int RunPlannerMain(int argc, char** argv);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PLANNER_MAIN_LIB_H_
