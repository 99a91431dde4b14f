#ifndef DCP_WORKER_DEVICE_CHECK_DEVICE_CHECK_MAIN_LIB_H_
#define DCP_WORKER_DEVICE_CHECK_DEVICE_CHECK_MAIN_LIB_H_

namespace dcp {

/// The `dcp_device_check` process (run `dcp_device_check --help` for the
/// flags): RunDeviceCheck on one device in a world of one rank, with the
/// sizes of --sizes=h200 (one H200, about 10 minutes) or --sizes=tiny (the
/// CPU, seconds). Prints the report (fits, profile, collectives, skipped
/// items, the predicted-vs-measured table) to stdout and, with --out=DIR,
/// writes it to DIR/device_check.md and the rows to DIR/device_check.tsv;
/// progress goes to stderr. Exit codes: kExitOk; kExitFailure when a phase
/// failed (the error on stderr) or no micro-batch ran; kExitUsageError for
/// bad flags and for --device=cuda without a CUDA build or a visible GPU
/// (the message says which, and that --device=cpu checks the pipeline).
int RunDeviceCheckMain(int argc, char** argv);

}  // namespace dcp

#endif  // DCP_WORKER_DEVICE_CHECK_DEVICE_CHECK_MAIN_LIB_H_
