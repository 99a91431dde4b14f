// The `dcp_planner` process: see planner/service/planner_main_lib.h.
#include "planner/service/planner_main_lib.h"

int main(int argc, char** argv) { return dcp::RunPlannerMain(argc, argv); }
