#include "planner/service/planner_state_store.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "planner/client/batch_fingerprint.h"
#include "planner/service/step_state_files.h"

namespace dcp {
namespace {

constexpr char kJobKey[] = "job.pb";
/// The job record of the JSON format this one replaced.
constexpr char kLegacyJobKey[] = "job.json";
constexpr char kWorkerPrefix[] = "worker_";
constexpr char kParamsPrefix[] = "params_v";
constexpr char kProfilePrefix[] = "profile_";
constexpr const char* kStepPrefix = kStepRecordPrefix;
constexpr char kCompactedStepsKey[] = "steps_compacted.pb";
/// Appended to the name of a record set aside because it did not parse; the
/// loader reads no such file.
constexpr char kCorruptSuffix[] = ".corrupt";

std::string WorkerKey(int first_rank) {
  return absl::StrFormat("%s%06d.pb", kWorkerPrefix, first_rank);
}
std::string ParamsKey(int64_t version) {
  return absl::StrFormat("%s%012d.pb", kParamsPrefix, version);
}
std::string ProfileKey(int slot) {
  return absl::StrFormat("%s%06d.pb", kProfilePrefix, slot);
}
std::string StepKey(int64_t step) { return StepFileName(kStepPrefix, step); }

// A corrupt or foreign state directory.
absl::Status StateError(absl::string_view key, absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("state file '", key, "' ", why,
                   "; restore the state directory or start with an empty one"));
}

/// Every stored (key, value) whose key starts with `prefix`, in key order.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadAll(
    const StateStore& store, absl::string_view prefix) {
  absl::StatusOr<std::vector<std::string>> keys = store.List(prefix);
  if (!keys.ok()) return keys.status();
  std::vector<std::pair<std::string, std::string>> values;
  for (const std::string& key : *keys) {
    if (absl::EndsWith(key, kCorruptSuffix)) continue;  // set aside
    absl::StatusOr<std::optional<std::string>> stored = store.Read(key);
    if (!stored.ok()) return stored.status();
    if (!stored->has_value()) continue;  // removed since listed
    values.emplace_back(key, **std::move(stored));
  }
  return values;
}

/// Parses every record under `prefix` into `out` (one per key).
template <typename Record>
absl::Status ReadRecords(const StateStore& store, absl::string_view prefix,
                         absl::string_view what, std::vector<Record>* out) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> stored =
      ReadAll(store, prefix);
  if (!stored.ok()) return stored.status();
  for (const auto& [key, bytes] : *stored) {
    Record record;
    if (!record.ParseFromString(bytes)) {
      return StateError(key, absl::StrCat("is not a ", what, " record"));
    }
    out->push_back(std::move(record));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PersistError(absl::string_view what, const absl::Status& status) {
  // The store's error names the file and says what to do about the
  // directory (StateStore::Write), after its retries.
  const std::string message =
      absl::StrCat("cannot record ", what, " durably: ", status.message());
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      return absl::ResourceExhaustedError(message);
    case absl::StatusCode::kPermissionDenied:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(
          absl::StrCat(message, "; the call may be retried"));
  }
}

absl::StatusOr<std::unique_ptr<PlannerStateStore>> PlannerStateStore::Open(
    absl::string_view directory, const v1::JobRecord& job,
    PlannerState* state) {
  absl::StatusOr<std::unique_ptr<StateStore>> opened =
      StateStore::Open(directory);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<PlannerStateStore> store(
      new PlannerStateStore(*std::move(opened)));
  DCP_RETURN_IF_ERROR(store->CheckJob(job));
  DCP_RETURN_IF_ERROR(store->Load(state));
  return store;
}

absl::Status PlannerStateStore::CheckJob(const v1::JobRecord& job) {
  absl::StatusOr<std::optional<std::string>> legacy =
      store_->Read(kLegacyJobKey);
  if (!legacy.ok()) return legacy.status();
  if (legacy->has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state directory '", directory(),
        "' was written by an earlier planner release (JSON state files such "
        "as job.json); this planner keeps typed protobuf records (job.pb) "
        "and does not read the old format: start with a fresh state_dir (or "
        "run the planner release that wrote it)"));
  }
  absl::StatusOr<std::optional<std::string>> stored = store_->Read(kJobKey);
  if (!stored.ok()) return stored.status();
  if (!stored->has_value()) {
    // Written with the first record or once the planner has started: a
    // start that fails before (a port in use, a bad flag found late) must
    // not claim the directory for its configuration.
    absl::MutexLock lock(&job_mutex_);
    unrecorded_job_ = job;
    return absl::OkStatus();
  }
  v1::JobRecord previous;
  if (!previous.ParseFromString(**stored)) {
    return StateError(kJobKey, "is not a job record");
  }
  // Step records hold fingerprints of the version the directory was started
  // with; they cannot be compared with another version's.
  if (previous.batch_fingerprint_version() != job.batch_fingerprint_version()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state directory '", directory(),
        "' records batch fingerprints of version ",
        previous.batch_fingerprint_version(),
        " but this planner computes version ", job.batch_fingerprint_version(),
        " (see planner/client/batch_fingerprint.h), so its steps' batches "
        "cannot be checked; start with a fresh state_dir (or run the planner "
        "release that wrote it)"));
  }
  if (!google::protobuf::util::MessageDifferencer::Equals(previous, job)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state directory '", directory(),
        "' belongs to a different job (its model, cluster or planner options "
        "differ: ",
        previous.ShortDebugString(), " vs ", job.ShortDebugString(),
        "); use a fresh state_dir for a new job"));
  }
  return absl::OkStatus();
}

absl::Status PlannerStateStore::Load(PlannerState* state) const {
  DCP_RETURN_IF_ERROR(
      ReadRecords(*store_, kWorkerPrefix, "worker", &state->workers));
  std::vector<v1::ParamsVersionRecord> versions;
  DCP_RETURN_IF_ERROR(
      ReadRecords(*store_, kParamsPrefix, "parameter version", &versions));
  for (v1::ParamsVersionRecord& version : versions) {
    if (version.params_version() < 1 ||
        state->params_versions.count(version.params_version()) > 0) {
      return StateError(ParamsKey(version.params_version()),
                        "is not a parameter version");
    }
    const int64_t number = version.params_version();
    state->params_versions[number] = std::move(version);
  }
  std::vector<v1::ProfileRecord> profiles;
  DCP_RETURN_IF_ERROR(
      ReadRecords(*store_, kProfilePrefix, "profile", &profiles));
  for (v1::ProfileRecord& profile : profiles) {
    state->profiles.push_back(std::move(*profile.mutable_profile()));
  }
  DCP_RETURN_IF_ERROR(LoadSteps(state));
  absl::StatusOr<std::optional<std::string>> compacted =
      store_->Read(kCompactedStepsKey);
  if (!compacted.ok()) return compacted.status();
  if (compacted->has_value() &&
      !state->compacted_steps.ParseFromString(**compacted)) {
    return StateError(kCompactedStepsKey, "is not a compacted step history");
  }
  return absl::OkStatus();
}

absl::Status PlannerStateStore::LoadSteps(PlannerState* state) const {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> stored =
      ReadAll(*store_, kStepPrefix);
  if (!stored.ok()) return stored.status();
  for (const auto& [key, bytes] : *stored) {
    const std::optional<int64_t> step = StepOfFileName(key, kStepPrefix);
    if (!step.has_value()) continue;  // not a step record's name
    v1::StepRecord record;
    std::string why;
    if (!record.ParseFromString(bytes)) {
      why = absl::StrCat("does not parse as a step record (", bytes.size(),
                         " bytes: truncated or corrupt)");
    } else if (record.step() != *step) {
      // An empty or cut-short file can parse, with the step at its default.
      why = absl::StrCat("records step ", record.step(),
                         ", not the step its name says (truncated or corrupt)");
    } else {
      state->steps.push_back(std::move(record));
      continue;
    }
    // A step record only claims its step's batch and parameter version:
    // without it the step is planned again (for whatever batch comes), so
    // one bad file must not stop the planner. Kept, renamed, for a person to
    // look at; never read again.
    const std::string aside = absl::StrCat(key, kCorruptSuffix);
    if (absl::Status status = store_->Rename(key, aside); !status.ok()) {
      return StateError(
          key, absl::StrCat(why, ", and setting it aside as '", aside,
                            "' failed (", status.message(), ")"));
    }
    state->set_aside.push_back(absl::StrCat(
        "state file '", directory(), "/", key, "' ", why, "; set aside as '",
        aside, "', step ", *step, " will be planned again"));
  }
  return absl::OkStatus();
}

absl::Status PlannerStateStore::RecordJob() {
  // Held through the write: a record written meanwhile waits for job.pb.
  absl::MutexLock lock(&job_mutex_);
  if (!unrecorded_job_.has_value()) return absl::OkStatus();
  DCP_RETURN_IF_ERROR(
      store_->Write(kJobKey, unrecorded_job_->SerializeAsString()));
  unrecorded_job_.reset();
  return absl::OkStatus();
}

absl::Status PlannerStateStore::WriteWorker(const v1::WorkerRecord& record) {
  DCP_RETURN_IF_ERROR(RecordJob());
  return store_->Write(WorkerKey(record.first_rank()),
                       record.SerializeAsString());
}

absl::Status PlannerStateStore::WriteParamsVersion(
    const v1::ParamsVersionRecord& record) {
  DCP_RETURN_IF_ERROR(RecordJob());
  return store_->Write(ParamsKey(record.params_version()),
                       record.SerializeAsString());
}

absl::Status PlannerStateStore::WriteProfile(
    int slot, const v1::SubmitProfileRequest& profile) {
  DCP_RETURN_IF_ERROR(RecordJob());
  v1::ProfileRecord record;
  *record.mutable_profile() = profile;
  return store_->Write(ProfileKey(slot), record.SerializeAsString());
}

absl::Status PlannerStateStore::WriteStep(const v1::StepRecord& record) {
  DCP_RETURN_IF_ERROR(RecordJob());
  return store_->Write(StepKey(record.step()), record.SerializeAsString());
}

absl::Status PlannerStateStore::DeleteWorker(int first_rank) {
  return store_->Delete(WorkerKey(first_rank));
}

absl::Status PlannerStateStore::DeleteStep(int64_t step) {
  for (const std::string& key :
       {StepFileName(kStepReportsPrefix, step),
        StepFileName(kStepPlanPrefix, step), StepKey(step)}) {
    DCP_RETURN_IF_ERROR(store_->Delete(key));
  }
  return absl::OkStatus();
}

absl::Status PlannerStateStore::WriteStepPlan(
    const v1::StepPlanRecord& record) {
  DCP_RETURN_IF_ERROR(RecordJob());
  return store_->Write(StepFileName(kStepPlanPrefix, record.step()),
                       record.SerializeAsString());
}

absl::Status PlannerStateStore::WriteStepReports(
    const v1::StepReportsRecord& record) {
  DCP_RETURN_IF_ERROR(RecordJob());
  return store_->Write(StepFileName(kStepReportsPrefix, record.step()),
                       record.SerializeAsString());
}

absl::Status PlannerStateStore::CompactSteps(
    const v1::CompactedStepsRecord& compacted,
    const std::vector<int64_t>& left_window) {
  DCP_RETURN_IF_ERROR(RecordJob());
  // The history first: a crash between leaves a step both compacted and
  // recorded, which loading tolerates (the record wins).
  DCP_RETURN_IF_ERROR(
      store_->Write(kCompactedStepsKey, compacted.SerializeAsString()));
  for (int64_t step : left_window) {
    DCP_RETURN_IF_ERROR(store_->Delete(StepKey(step)));
  }
  // Plan and report records whose step has no record left: those of
  // `left_window`, and any recorded while its step was leaving. Listed
  // before the step records: a step's record is written before its plan's.
  std::vector<std::pair<std::string, int64_t>> step_files;
  for (const char* prefix : {kStepPlanPrefix, kStepReportsPrefix}) {
    absl::StatusOr<std::vector<std::string>> keys = store_->List(prefix);
    if (!keys.ok()) return keys.status();
    for (const std::string& key : *keys) {
      if (std::optional<int64_t> step = StepOfFileName(key, prefix)) {
        step_files.emplace_back(key, *step);
      }
    }
  }
  absl::StatusOr<std::vector<std::string>> step_keys = store_->List(kStepPrefix);
  if (!step_keys.ok()) return step_keys.status();
  std::set<int64_t> recorded;
  for (const std::string& key : *step_keys) {
    if (std::optional<int64_t> step = StepOfFileName(key, kStepPrefix)) {
      recorded.insert(*step);
    }
  }
  for (const auto& [key, step] : step_files) {
    if (recorded.count(step) > 0) continue;
    DCP_RETURN_IF_ERROR(store_->Delete(key));
  }
  return absl::OkStatus();
}

}  // namespace dcp
