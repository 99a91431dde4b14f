#ifndef DCP_PLANNER_CLI_TEST_UTIL_H_
#define DCP_PLANNER_CLI_TEST_UTIL_H_

// Running the `dcp` command line in a test (planner/cli/cli.h). testonly.

#include <sstream>
#include <string>
#include <vector>

#include "planner/cli/cli.h"

namespace dcp {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

/// `dcp ARGS...`: its exit code and what it wrote to stdout and stderr.
inline CliResult RunCli(std::vector<std::string> args) {
  args.insert(args.begin(), "dcp");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::ostringstream out;
  std::ostringstream err;
  CliResult result;
  result.exit_code =
      RunDcpCli(static_cast<int>(args.size()), argv.data(), out, err);
  result.out = out.str();
  result.err = err.str();
  return result;
}

}  // namespace dcp

#endif  // DCP_PLANNER_CLI_TEST_UTIL_H_
