#ifndef DCP_PLANNER_SERVICE_WORKER_REGISTRY_H_
#define DCP_PLANNER_SERVICE_WORKER_REGISTRY_H_

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/model_spec.h"
#include "dcp/v1/planner_service.pb.h"
#include "dcp/v1/planner_state.pb.h"
#include "planner/service/planner_metrics.h"
#include "planner/service/planner_state_store.h"

namespace dcp {

/// Who makes a call: a worker id (empty: anonymous) and the incarnation of
/// its process (RegisterWorkerRequest.incarnation; empty: not checked).
struct WorkerCaller {
  absl::string_view worker_id;
  absl::string_view incarnation;
};

/// The workers of a job: their node slots and ranks (nodes in order of
/// first registration; a node's ranks are contiguous from its first rank),
/// and their liveness (last call, last step).
///
/// Thread model: `mu_` guards the workers and nodes and is held only for
/// in-memory work, never across I/O. `registration_mu_` (taken first)
/// serializes registrations, which write one worker's record to the state
/// store between two short holds of `mu_`: a registration never makes
/// Touch, GetPlan or ListWorkers wait for the disk, and never rewrites
/// other workers' records. Calls no other manager.
class WorkerRegistry {
 public:
  /// How many earlier incarnations of one worker id are remembered (and
  /// refused by name).
  static constexpr int kMaxSupersededIncarnations = 8;

  /// `store` (may be null: memory only), `clock`, `metrics` and `log` must
  /// outlive the registry. `job_id` (dcp_planner --job-id; empty: any job)
  /// is the only job whose workers may register.
  WorkerRegistry(ModelSpec model, ClusterSpec cluster,
                 absl::Duration liveness_timeout, const Clock& clock,
                 PlannerStateStore* store, PlannerMetrics& metrics,
                 std::function<void(const std::string&)> log,
                 std::string job_id = "");

  /// Installs the workers of a state directory (before any other call).
  absl::Status Load(const std::vector<v1::WorkerRecord>& records);

  /// Registers (or re-registers) a worker; the request must have passed
  /// ValidateRegisterWorkerRequest. A new worker that finds no free slot
  /// takes over the slot (node index and ranks) of a node whose workers
  /// have all been silent for longer than the liveness timeout: they are
  /// forgotten, also on disk. A registration with a new incarnation of a
  /// known worker id is its process restarted: it takes over the id (the
  /// earlier incarnation is refused from then on, FAILED_PRECONDITION, and
  /// the takeover is logged). Registrations are attributed by their job
  /// id: PERMISSION_DENIED for another job than the registry's (when it has
  /// one); FAILED_PRECONDITION when a worker id comes back for another job,
  /// or when the only slot a newcomer could take over holds another job's
  /// workers.
  absl::StatusOr<v1::RegisterWorkerResponse> Register(
      const v1::RegisterWorkerRequest& request)
      ABSL_LOCKS_EXCLUDED(registration_mu_, mu_);

  /// Marks a call from `caller` (an empty worker id: anonymous, always OK);
  /// with `activity` also the worker as active at `step`. NOT_FOUND if
  /// unknown; FAILED_PRECONDITION when the caller names an incarnation
  /// other than the worker's registered one (a replaced process, or a
  /// second copy of the job).
  absl::Status Touch(const WorkerCaller& caller, bool activity, int64_t step)
      ABSL_LOCKS_EXCLUDED(mu_);
  /// Touch, then FAILED_PRECONDITION (saying what is missing) unless the
  /// world is complete: plans are served only then.
  absl::Status CheckCanServe(const WorkerCaller& caller, int64_t step)
      ABSL_LOCKS_EXCLUDED(mu_);
  /// Touch (active at `step`), then INVALID_ARGUMENT unless `rank` is one
  /// of the worker's ranks.
  absl::Status CheckReport(const WorkerCaller& caller, int64_t step, int rank)
      ABSL_LOCKS_EXCLUDED(mu_);

  v1::ListWorkersResponse List() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Worker {
    v1::RegisterWorkerRequest registration;
    int node_index = 0;
    int first_rank = 0;
    /// The wall-clock time of its last call, shown in ListWorkers.
    absl::Time last_seen = absl::InfinitePast();
    /// The monotonic clock's reading at its last call: liveness is measured
    /// with this alone, so that a jump of the wall clock neither loses a live
    /// worker nor keeps a silent one.
    absl::Time last_seen_monotonic = absl::InfinitePast();
    /// Has fetched a plan or reported statistics.
    bool active = false;
    /// Its latest registration had `joining` set (in memory only).
    bool joining = false;
    /// Incarnations before the registered one, oldest first (at most
    /// kMaxSupersededIncarnations).
    std::vector<std::string> superseded;
    int64_t last_step = -1;
  };
  struct Node {
    std::string name;
    int ranks_used = 0;
  };

  void Log(const std::string& line) const {
    if (log_) log_(line);
  }
  /// Stamps `worker` as heard from now, on both clocks.
  void MarkSeen(Worker& worker) const {
    worker.last_seen = clock_.Now();
    worker.last_seen_monotonic = clock_.MonotonicNow();
  }
  bool WorldComplete() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Every worker's latest registration had `joining` set.
  bool AllJoining() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// The workers not joining yet, with how long each has been silent.
  std::string NotJoining() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// FAILED_PRECONDITION unless `incarnation` (non-empty) is the worker's
  /// registered one (or the worker has none); `call` names the call.
  absl::Status CheckIncarnation(const Worker& worker,
                                absl::string_view incarnation,
                                absl::string_view call) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Whether `incarnation` is one `worker`'s id had before its current one.
  static bool Superseded(const Worker& worker, absl::string_view incarnation) {
    return std::find(worker.superseded.begin(), worker.superseded.end(),
                     incarnation) != worker.superseded.end();
  }
  /// The record of `worker` in the state directory.
  static v1::WorkerRecord RecordOf(const Worker& worker);
  std::string WaitingFor() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string RendezvousAddress() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckBackend(const v1::RegisterWorkerRequest& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// FAILED_PRECONDITION when another worker declared another training
  /// state (precision, optimizer sharding) than `request`.
  absl::Status CheckTrainingState(const v1::RegisterWorkerRequest& request)
      const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::RegisterWorkerResponse Response(const Worker& worker) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Where a new worker goes, and the stale workers it replaces there.
  struct Placement {
    Worker worker;
    /// Workers of the slot it takes over (all silent for longer than the
    /// liveness timeout); empty for a free slot.
    std::vector<std::string> replaced;
  };
  /// Where a new worker goes, or why it cannot: a free node slot or ranks,
  /// else the slot of a node whose workers are all stale.
  absl::StatusOr<Placement> Place(const v1::RegisterWorkerRequest& request)
      const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// The first node slot (`only` if >= 0) whose workers are all stale and
  /// of job `job_id`; FAILED_PRECONDITION naming both jobs when the only
  /// stale slots are another job's; nullopt when no slot is stale.
  absl::StatusOr<std::optional<int>> StaleSlot(int only,
                                               const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// PERMISSION_DENIED unless the request is of the registry's job.
  absl::Status CheckJob(const v1::RegisterWorkerRequest& request) const;
  absl::Status TouchLocked(const WorkerCaller& caller, bool activity,
                           int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ModelSpec model_;
  const ClusterSpec cluster_;
  const int world_size_;
  const absl::Duration liveness_timeout_;
  const Clock& clock_;
  PlannerStateStore* const store_;
  PlannerMetrics& metrics_;
  const std::function<void(const std::string&)> log_;
  /// Empty: workers of any job (or of none) may register.
  const std::string job_id_;

  absl::Mutex registration_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
  /// Index = node slot.
  std::vector<Node> nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_WORKER_REGISTRY_H_
