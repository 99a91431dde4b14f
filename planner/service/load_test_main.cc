// The `planner_load_test` command: see planner/service/load_test.h.
#include "planner/service/load_test.h"

int main(int argc, char** argv) { return dcp::RunLoadTestMain(argc, argv); }
