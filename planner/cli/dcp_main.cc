// The `dcp` command line: see planner/cli/cli.h.
#include <iostream>

#include "planner/cli/cli.h"

int main(int argc, char** argv) {
  return dcp::RunDcpCli(argc, argv, std::cout, std::cerr);
}
