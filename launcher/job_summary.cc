#include "launcher/job_summary.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dcp {
namespace {

// Steps of `run` its means leave out when they can: step 0 also creates
// the SP groups' communicators.
size_t WarmSteps(const RunSummary& run) { return run.steps.size() > 1 ? 1 : 0; }

std::string MeanLine(const std::string& name, size_t width,
                     const RunSummary& run) {
  return absl::StrFormat(
      "%s (%d steps): mean step %.3f s measured, %.3f s predicted "
      "(without step 0: %.3f s measured)",
      absl::StrCat(name, std::string(width - name.size(), ' ')),
      run.steps.size(), run.MeanMeasuredSeconds(), run.MeanPredictedSeconds(),
      run.MeanMeasuredSeconds(WarmSteps(run)));
}

std::string SpeedupLine(const RunSummary& dcp, const PeerRun& peer) {
  const RunSummary& run = peer.summary;
  return absl::StrFormat(
      "measured speedup dcp vs %s: %.2fx (without step 0: %.2fx); "
      "predicted %.2fx",
      peer.name, run.MeanMeasuredSeconds() / dcp.MeanMeasuredSeconds(),
      run.MeanMeasuredSeconds(WarmSteps(run)) /
          dcp.MeanMeasuredSeconds(WarmSteps(dcp)),
      run.MeanPredictedSeconds() / dcp.MeanPredictedSeconds());
}

std::string LossLine(const RunSummary& dcp, const PeerRun& peer) {
  const RunSummary& run = peer.summary;
  double max_difference = 0;
  const size_t common = std::min(dcp.steps.size(), run.steps.size());
  for (size_t i = 0; i < common; ++i) {
    max_difference = std::max(max_difference,
                              std::abs(dcp.steps[i].loss - run.steps[i].loss));
  }
  return absl::StrFormat(
      "same batches, same model: max |loss dcp - loss %s| = %.2g over %d "
      "steps",
      peer.name, max_difference, common);
}

// The median the cost model is held to, and whether the online refit
// brings it down over the run.
std::string MedianErrorLine(const std::string& label, const RunSummary& run) {
  const size_t n = run.steps.size();
  const size_t few = std::min<size_t>(3, n);
  return absl::StrFormat(
      "cost model error (%s): median %.1f%% over %d steps; first %d steps "
      "%.1f%%, last %d steps %.1f%%",
      label, 100 * run.MedianRelativeError(), n, few,
      100 * run.MedianRelativeError(0, few), few,
      100 * run.MedianRelativeError(n - few));
}

}  // namespace

std::vector<std::string> JobSummaryLines(const RunSummary& dcp,
                                         absl::Span<const PeerRun> peers) {
  std::vector<std::string> lines = {"", "== summary =="};
  if (dcp.steps.empty()) {
    lines.push_back("no dcp steps ran");
    return lines;
  }
  std::vector<const PeerRun*> ran;
  size_t width = 3;  // "dcp"
  for (const PeerRun& peer : peers) {
    if (peer.summary.steps.empty()) continue;
    ran.push_back(&peer);
    width = std::max(width, peer.name.size());
  }
  lines.push_back(MeanLine("dcp", width, dcp));
  for (const PeerRun* peer : ran) {
    lines.push_back(MeanLine(peer->name, width, peer->summary));
  }
  for (const PeerRun* peer : ran) lines.push_back(SpeedupLine(dcp, *peer));
  for (const PeerRun* peer : ran) lines.push_back(LossLine(dcp, *peer));
  lines.push_back(absl::StrFormat(
      "cost model error (dcp): mean |predicted - measured| / measured = "
      "%.1f%% over %d steps (%.1f%% without step 0)",
      100 * dcp.MeanRelativeError(), dcp.steps.size(),
      100 * dcp.MeanRelativeError(WarmSteps(dcp))));
  lines.push_back(MedianErrorLine("dcp", dcp));
  for (const PeerRun* peer : ran) {
    lines.push_back(MedianErrorLine(peer->name, peer->summary));
  }
  return lines;
}

}  // namespace dcp
