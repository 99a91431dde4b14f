#ifndef DCP_PLANNER_SERVICE_PLANNER_STATE_STORE_H_
#define DCP_PLANNER_SERVICE_PLANNER_STATE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "dcp/v1/planner_state.pb.h"
#include "dcp/v1/step_state.pb.h"
#include "planner/service/state_store.h"

namespace dcp {

/// Everything a state directory holds, read once at start.
struct PlannerState {
  std::vector<v1::WorkerRecord> workers;
  /// By version (1, 2, ...; the defaults, version 0, are not stored).
  std::map<int64_t, v1::ParamsVersionRecord> params_versions;
  /// By slot (0, 1, ...: order of each worker's first profile).
  std::vector<v1::SubmitProfileRequest> profiles;
  /// Steps inside the plan-cache window when the planner stopped.
  std::vector<v1::StepRecord> steps;
  /// Steps that left the window (their parameter versions only).
  v1::CompactedStepsRecord compacted_steps;
  /// One line per record that did not parse and was set aside (renamed to
  /// "<name>.corrupt") instead of refusing the directory, for the log.
  std::vector<std::string> set_aside;
};

/// The planner's durable state as typed protobuf records
/// (proto/dcp/v1/planner_state.proto) over a StateStore: one file per
/// worker, parameter version, profile slot and window step, plus the job
/// record and the compacted history of steps that left the window. A
/// registration writes one worker's record; a step that leaves the window
/// has its record folded into the compacted history and deleted, so the
/// directory holds O(workers + versions + window) files however long the
/// job runs. Each step of the window also has its plan (StepPlanRecord) and
/// its ranks' reports (StepReportsRecord) of proto/dcp/v1/step_state.proto,
/// which only tools read (planner/service/step_state_files.h); they leave
/// with the step.
///
/// A directory written by the earlier JSON format (job.json) is refused
/// with an error saying to start fresh.
///
/// Thread-safe: writes are serialized by the StateStore. Callers hold no
/// mutex of theirs while calling it (it does disk I/O and fsyncs).
class PlannerStateStore {
 public:
  /// Opens `directory` (creating it), checks that it belongs to `job` and
  /// reads it into `state`. A fresh directory gets `job` (job.pb) only with
  /// its first record or RecordJob(), so that a start that fails before
  /// either leaves none: a corrected configuration is then not refused.
  /// FAILED_PRECONDITION for a foreign, old-format or corrupt directory; a
  /// step record that does not parse is set aside instead (see
  /// PlannerState::set_aside): the step is planned again.
  static absl::StatusOr<std::unique_ptr<PlannerStateStore>> Open(
      absl::string_view directory, const v1::JobRecord& job,
      PlannerState* state);

  /// Writes the job record (job.pb) into a fresh directory, claiming it for
  /// this job; OK at once when it is there. The planner calls it once it
  /// has started; every write of a record calls it first, so no record is
  /// ever without its job's.
  absl::Status RecordJob();

  absl::Status WriteWorker(const v1::WorkerRecord& record);
  /// Removes the record of the worker whose ranks start at `first_rank`
  /// (replaced by a new worker); OK if there is none.
  absl::Status DeleteWorker(int first_rank);
  absl::Status WriteParamsVersion(const v1::ParamsVersionRecord& record);
  absl::Status WriteProfile(int slot, const v1::SubmitProfileRequest& profile);
  absl::Status WriteStep(const v1::StepRecord& record);
  /// Removes `step`'s records (a batch that failed to plan must not claim
  /// its step across a restart); OK if there are none.
  absl::Status DeleteStep(int64_t step);
  /// A planned step's plan and its batch's lengths, for tools.
  absl::Status WriteStepPlan(const v1::StepPlanRecord& record);
  /// A step's ranks' reports so far, for tools.
  absl::Status WriteStepReports(const v1::StepReportsRecord& record);
  /// Replaces the compacted history by `compacted` (which must cover
  /// `left_window`), then deletes those steps' records, and the plan and
  /// report records of every step without a step record (also one recorded
  /// while its step was leaving the window).
  absl::Status CompactSteps(const v1::CompactedStepsRecord& compacted,
                            const std::vector<int64_t>& left_window);

  const std::string& directory() const { return store_->directory(); }

 private:
  explicit PlannerStateStore(std::unique_ptr<StateStore> store)
      : store_(std::move(store)) {}

  absl::Status CheckJob(const v1::JobRecord& job);
  absl::Status Load(PlannerState* state) const;
  /// The step records into `state->steps`; one that does not parse (or
  /// records another step than its name) is renamed "<name>.corrupt" and
  /// said in `state->set_aside`.
  absl::Status LoadSteps(PlannerState* state) const;

  const std::unique_ptr<StateStore> store_;
  absl::Mutex job_mutex_;
  /// The job record a fresh directory has not been given yet (RecordJob()).
  std::optional<v1::JobRecord> unrecorded_job_ ABSL_GUARDED_BY(job_mutex_);
};

/// The status for a failure to write state (already retried by the store,
/// whose message says what to do): a full disk (RESOURCE_EXHAUSTED) or a
/// read-only or foreign directory (PERMISSION_DENIED) keeps its code; other
/// I/O errors become UNAVAILABLE, which clients retry. `what` names what was
/// not recorded ("the registration").
absl::Status PersistError(absl::string_view what, const absl::Status& status);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PLANNER_STATE_STORE_H_
