// Rendezvous: registering with the planner until the world is complete, and
// finding rank 0's c10d store. No LibTorch: the agent turns the store's
// address into C10dOptions.

#ifndef DCP_WORKER_RENDEZVOUS_H_
#define DCP_WORKER_RENDEZVOUS_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "planner/client/planner_client.h"

namespace dcp {

struct RendezvousOptions {
  /// Stable id (the pod name) and the node this process runs on.
  std::string worker_id;
  std::string node_name;
  /// The job the launcher started this worker for (empty: none); a planner
  /// with a --job-id accepts only its own job's workers.
  std::string job_id;
  /// Host and port the other ranks reach this worker's c10d store on (used
  /// when the planner makes it rank 0); port 0 picks a free one before
  /// registering.
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  /// What this worker announces: its c10d backend ("gloo" or "nccl") and
  /// its LibTorch version.
  std::string backend = "gloo";
  std::string libtorch_version;
  /// The most SP sub-groups each rank keeps cached (0: unbounded).
  int max_cached_groups = 0;
  /// How it trains ("bf16" or "fp32"; "zero1" or "none"), so that the
  /// planner's memory model counts its training state; empty: not declared.
  std::string precision;
  std::string optimizer_sharding;
  /// This process's incarnation (NewIncarnation), sent with every
  /// registration; empty: none.
  std::string incarnation;
  /// Once the world is complete, how long every worker has to say it is
  /// joining (RegisterWorkerRequest.joining) before this one gives up,
  /// naming the workers that did not: a worker that registered and went
  /// silent fails its peers here, not in the c10d store.
  absl::Duration join_timeout = absl::Seconds(30);
  /// How long registration plus finding rank 0's store may take.
  absl::Duration world_timeout = absl::Minutes(10);
  /// Backoff of the polls while the world is incomplete (and while rank 0's
  /// store does not answer).
  absl::Duration poll_initial_backoff = absl::Milliseconds(100);
  absl::Duration poll_max_backoff = absl::Seconds(2);
  /// Polled while waiting for the world: true gives up waiting (Register
  /// returns kStopRequested). Empty: never.
  std::function<bool()> stop_requested;
  /// Waits between polls; empty: absl::SleepFor.
  std::function<void(absl::Duration)> sleep;
  /// Diagnostics, one line each; required.
  std::function<void(const std::string&)> log;
};

/// Host and port of a c10d TCPStore. Plain value.
struct StoreAddress {
  std::string host;
  int port = 0;
};

/// One worker's way into the world: Register() polls RegisterWorker with
/// backoff until the planner says the world is complete, then (with
/// `joining` set) until every worker has said it is joining (or the
/// deadline passes, or a stop is requested); then AwaitStore() gives the
/// address of
/// rank 0's store (rank 0's own; other ranks wait until rank 0's announced
/// store accepts connections). Both share one deadline, world_timeout after
/// Register() started.
///
/// Errors: the planner's status after its client's retries, with what was
/// being done in front; DEADLINE_EXCEEDED naming what is still missing (the
/// workers that did not join within join_timeout included);
/// FAILED_PRECONDITION when the planner moves this worker to another rank
/// while it joins.
///
/// Not thread-safe: one thread calls Register() once, then AwaitStore().
/// `planner` and `clock` must outlive it.
class Rendezvous {
 public:
  enum class Outcome {
    /// The world is complete: registration() and rank() are valid.
    kWorldComplete,
    /// Stopped on request while the world was incomplete.
    kStopRequested,
  };

  Rendezvous(PlannerClient& planner, RendezvousOptions options,
             const Clock& clock);

  absl::StatusOr<Outcome> Register();

  /// The planner's answer once the world was complete (the model, the
  /// cluster, this worker's rank and node slot).
  const v1::RegisterWorkerResponse& registration() const {
    return registration_;
  }
  int rank() const { return registration_.first_rank(); }

  /// The address of rank 0's store: on rank 0 its own (store_host and the
  /// port it announced). On other ranks rank 0's announced address once it
  /// accepts connections: a restarted job's first registrations may still
  /// show the address of rank 0's previous incarnation (the world looks
  /// complete from the old registrations), so until the store answers this
  /// re-registers to pick up the address rank 0 announces when it comes
  /// back.
  absl::StatusOr<StoreAddress> AwaitStore();

 private:
  void Sleep(absl::Duration duration) const;
  bool StopRequested() const;

  PlannerClient& planner_;
  const RendezvousOptions options_;
  const Clock& clock_;
  /// The port this worker's store listens on if it is rank 0.
  int store_port_ = 0;
  v1::RegisterWorkerRequest request_;
  /// Until when registration and finding the store may wait.
  absl::Time deadline_;
  v1::RegisterWorkerResponse registration_;
};

/// Whether a TCP connection to host:port succeeds within a second (closed
/// at once). Thread-safe.
bool AcceptsConnections(const std::string& host, int port);

}  // namespace dcp

#endif  // DCP_WORKER_RENDEZVOUS_H_
