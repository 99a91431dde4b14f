#ifndef DCP_PLANNER_CLI_H_
#define DCP_PLANNER_CLI_H_

#include <ostream>

#include "common/main_prologue.h"

namespace dcp {

/// The `dcp` command line: `dcp simulate`, `dcp plan`, `dcp validate`,
/// `dcp price` and `dcp timeline` (run `dcp --help` for the flags). `argv[0]` is the program name. Results
/// go to `out`; progress and one-line error messages to `err`. Returns the
/// exit code (common/main_prologue.h): kExitOk, kExitFailure when the work
/// failed (planning error, invalid plan, unparsable plan file) or
/// kExitUsageError when the command line was wrong (unknown subcommand or
/// flag, bad value, unreadable input file, unknown model preset). Progress
/// lines are printed every step when `err` is std::cerr on a terminal, else at
/// every 10% of runs of 10 steps or more. Not thread-safe (writes the streams).
int RunDcpCli(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace dcp

#endif  // DCP_PLANNER_CLI_H_
