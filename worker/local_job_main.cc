// The `dcp_local_job` process: see worker/local_job.h.
#include "worker/local_job.h"

int main(int argc, char** argv) { return dcp::RunLocalJobMain(argc, argv); }
