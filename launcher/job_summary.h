#ifndef DCP_LAUNCHER_JOB_SUMMARY_H_
#define DCP_LAUNCHER_JOB_SUMMARY_H_

// The local job's closing summary: dcp's run beside each peer strategy's
// run over the same batches (mean step times, speedups, loss agreement and
// the cost model's error).

#include <string>
#include <vector>

#include "absl/types/span.h"
#include "worker/run_summary.h"

namespace dcp {

/// A peer strategy's run beside dcp's; `name` is its workers' --plan-source.
struct PeerRun {
  std::string name;
  RunSummary summary;
};

/// The summary's lines, starting with a blank line and "== summary ==":
/// the mean step of every run that ran a step (also without step 0, which
/// builds the SP groups' communicators), the measured and predicted speedup
/// of dcp over each peer, the largest loss difference over the steps both
/// ran, and the cost model's mean and median relative error (the median
/// also over the first and last three steps, to show the online refit).
/// "no dcp steps ran" when dcp ran none; peers that ran none are left out.
std::vector<std::string> JobSummaryLines(const RunSummary& dcp,
                                         absl::Span<const PeerRun> peers);

}  // namespace dcp

#endif  // DCP_LAUNCHER_JOB_SUMMARY_H_
