// The `dcp_worker` process: see worker/worker_main_lib.h.
#include "worker/worker_main_lib.h"

int main(int argc, char** argv) { return dcp::RunWorkerMain(argc, argv); }
