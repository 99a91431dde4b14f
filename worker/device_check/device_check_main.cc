// The `dcp_device_check` process: see
// worker/device_check/device_check_main_lib.h.
#include "worker/device_check/device_check_main_lib.h"

int main(int argc, char** argv) { return dcp::RunDeviceCheckMain(argc, argv); }
