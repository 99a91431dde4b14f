#ifndef DCP_PLANNER_CLI_TEST_UTIL_H_
#define DCP_PLANNER_CLI_TEST_UTIL_H_

// Running the `dcp` command line in a test (planner/cli/cli.h), with the
// files and flags the CLI tests share. testonly.

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_files.h"
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

/// `name` in the test's temporary directory.
inline std::string TempPath(const std::string& name) {
  return TestTempPath("dcp_cli_test_" + name);
}

/// The number of newlines in `text`.
inline int CountLines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

/// One node of 8 GPUs and short sequences keep every run fast.
inline const std::vector<std::string> kSmallSetup = {
    "--nodes=1", "--gpus-per-node=8", "--workload=longtail:max=32768",
    "--global-batch-tokens=128K"};

/// `args` followed by `more`.
inline std::vector<std::string> With(std::vector<std::string> args,
                                     const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace dcp

#endif  // DCP_PLANNER_CLI_TEST_UTIL_H_
