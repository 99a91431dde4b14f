#ifndef DCP_WORKER_WORKER_MAIN_LIB_H_
#define DCP_WORKER_WORKER_MAIN_LIB_H_

#include "common/main_prologue.h"

namespace dcp {

/// The `dcp_worker` process (run `dcp_worker --help` for the flags): one
/// rank of a DCP training job. Builds a GrpcPlannerClient from the flags and
/// the environment (DCP_PLANNER_ADDRESS, DCP_PLANNER_TOKEN, DCP_WORKER_ID,
/// DCP_NODE_NAME, DCP_STORE_HOST, as a Kubernetes pod gets them), serves
/// Prometheus metrics when asked, and runs a WorkerAgent. Rank 0 prints the
/// fit and one line per step to stdout; diagnostics go to stderr with a UTC
/// timestamp. SIGTERM or SIGINT: every rank finishes the current step, they
/// stop at the same step boundary, rank 0 writes a checkpoint (with
/// --checkpoint-dir), and the process exits kExitOk; a second signal
/// exits at once. Exit codes: kExitOk, kExitFailure (the run failed: planner
/// unreachable, a collective timed out, ...; the error is on stderr),
/// kExitUsageError (an unknown flag, a bad value, no planner address). Call
/// from main() before starting other threads.
int RunWorkerMain(int argc, char** argv);

}  // namespace dcp

#endif  // DCP_WORKER_WORKER_MAIN_LIB_H_
