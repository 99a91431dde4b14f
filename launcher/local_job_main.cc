// The `dcp_local_job` process: see launcher/local_job.h.
#include "launcher/local_job.h"

int main(int argc, char** argv) { return dcp::RunLocalJobMain(argc, argv); }
