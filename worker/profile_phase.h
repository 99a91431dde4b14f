// The profile phase: whether the world profiles, RunProfile on every rank,
// each rank's samples to the planner, and rank 0's report of the fit.

#ifndef DCP_WORKER_PROFILE_PHASE_H_
#define DCP_WORKER_PROFILE_PHASE_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "cost_model/model_spec.h"
#include "planner/client/planner_client.h"
#include "worker/communication/communicator.h"
#include "worker/execution/profiler.h"
#include "worker/world_consensus.h"

namespace dcp {

struct ProfilePhaseOptions {
  std::string worker_id;
  /// This process's incarnation (RendezvousOptions::incarnation).
  std::string incarnation;
  /// This rank wants a profile (unless the planner already has fitted
  /// parameters, e.g. a restarted job).
  bool wanted = true;
  /// RunProfile's options, device, dtype and timeout included.
  ProfileOptions profile;
  int gpus_per_node = 1;
  /// Of the agreement and the barrier after the submissions.
  absl::Duration collective_timeout = absl::Seconds(60);
  /// Diagnostics, and rank 0's report lines; both required.
  std::function<void(const std::string&)> log;
  std::function<void(const std::string&)> print;
};

/// Runs the profile phase on this rank. The ranks agree (through
/// `consensus`) whether any wants a profile; if so every rank runs
/// RunProfile (collective), submits its own samples (SubmitProfile), waits
/// at a world barrier for the others' submissions, and rank 0 prints the
/// planner's fit. Every rank must call it. Errors name the step that failed.
/// Blocks; not thread-safe with respect to `communicator`.
absl::Status RunProfilePhase(PlannerClient& planner, const ModelSpec& model,
                             Communicator& communicator,
                             WorldConsensus& consensus,
                             const ProfilePhaseOptions& options,
                             const Clock& clock);

}  // namespace dcp

#endif  // DCP_WORKER_PROFILE_PHASE_H_
