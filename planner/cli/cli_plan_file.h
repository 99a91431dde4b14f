#ifndef DCP_PLANNER_CLI_PLAN_FILE_H_
#define DCP_PLANNER_CLI_PLAN_FILE_H_

// The `dcp` subcommands that read a plan file: `validate` and `price`
// (flags in planner/cli/cli.cc). Internal to the command line.

#include "common/command_line.h"
#include "planner/cli/cli_support.h"

namespace dcp {
namespace cli {

/// `dcp validate`: the plan file's checks, then its summary; exit code.
int RunValidate(const ParsedFlags& flags, Command& command);

/// `dcp price`: the checks, then the cost model's figures of the plan as a
/// table, JSON or (one layout) an SVG timeline; exit code.
int RunPrice(const ParsedFlags& flags, Command& command);

}  // namespace cli
}  // namespace dcp

#endif  // DCP_PLANNER_CLI_PLAN_FILE_H_
