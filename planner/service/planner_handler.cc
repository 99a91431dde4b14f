#include "planner/service/planner_handler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "planner/batch_check.h"
#include "planner/lower_bound.h"
#include "planner/plan.h"
#include "planner/service/batch_fingerprint.h"
#include "planner/service/proto_convert.h"
#include "planner/service/state_store.h"

namespace dcp {
namespace {

using json = nlohmann::json;

// Longest sequence a batch may name (2^40 tokens): far beyond anything
// plannable, small enough that sums over a batch cannot overflow.
constexpr int64_t kMaxLengthTokens = int64_t{1} << 40;
constexpr int kMaxSamplesPerBatch = 1 << 20;
constexpr int kMaxProfileSamples = 1 << 20;
// Submitted batches that may wait to be planned at once (a memory bound).
constexpr size_t kMaxPendingBatches = 256;
constexpr size_t kMaxIdentifierLength = 128;
constexpr size_t kMaxFreeTextLength = 256;
// Online refit: micro-batch measurements needed before the correction is
// applied, the relative change that makes a new parameter version, and the
// range a correction may take (beyond it the measurements are not of the
// same kind of hardware as the model).
constexpr int kMinRefitObservations = 4;
constexpr double kRefitChangeThreshold = 0.05;
constexpr double kMinComputeCorrection = 0.1;
constexpr double kMaxComputeCorrection = 10;
/// Online refit ignores a micro-batch whose predicted / measured compute is
/// outside [1 / this, this]: a broken measurement, not a calibration signal
/// (and one that could overflow the sums).
constexpr double kMaxRefitRatio = 100;

// State keys (see StateStore). job.json also records the
// kBatchFingerprintVersion of the step records' fingerprints (absent: 1).
constexpr char kJobKey[] = "job.json";
constexpr char kFingerprintVersionField[] = "batch_fingerprint_version";
constexpr char kWorkersKey[] = "workers.json";
constexpr char kParamsPrefix[] = "params_v";
constexpr char kProfilePrefix[] = "profile_";
constexpr char kStepPrefix[] = "step_";

std::string ParamsKey(int64_t version) {
  return absl::StrFormat("%s%012d.json", kParamsPrefix, version);
}
std::string ProfileKey(int slot) {
  return absl::StrFormat("%s%06d.pb", kProfilePrefix, slot);
}
std::string StepKey(int64_t step) {
  return absl::StrFormat("%s%020d.json", kStepPrefix, step);
}

// "7.28 s" for a second or more, three digits below ("0.0123 s").
std::string FormatSeconds(double seconds) {
  return seconds >= 0.995 || seconds == 0 ? absl::StrFormat("%.2f s", seconds)
                                          : absl::StrFormat("%.3g s", seconds);
}

std::string Hex(uint64_t value) { return absl::StrFormat("%016x", value); }

bool IsIdentifierCharacter(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
         c == '_' || c == ':' || c == '-';
}

// Printable excerpt of a user-supplied string for an error message.
std::string Quote(absl::string_view value) {
  std::string shown(value.substr(0, 64));
  for (char& c : shown) {
    if (!absl::ascii_isprint(static_cast<unsigned char>(c))) c = '?';
  }
  return absl::StrCat("'", shown, value.size() > 64 ? "...'" : "'");
}

absl::Status ValidateIdentifier(absl::string_view field,
                                absl::string_view value,
                                absl::string_view example) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is empty; set it to a stable name such as ", example));
  }
  if (value.size() > kMaxIdentifierLength) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", Quote(value), " has ", value.size(),
                     " characters; use at most ", kMaxIdentifierLength));
  }
  for (char c : value) {
    if (!IsIdentifierCharacter(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", Quote(value), " contains ",
                       Quote(absl::string_view(&c, 1)),
                       "; use only letters, digits and . _ : -"));
    }
  }
  return absl::OkStatus();
}

// Descriptive fields (gpu_kind, libtorch_version, address): printable ASCII,
// so that they log, persist and compare plainly.
absl::Status ValidateFreeText(absl::string_view field,
                              absl::string_view value) {
  if (value.size() > kMaxFreeTextLength) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", Quote(value), " has ", value.size(),
                     " characters; use at most ", kMaxFreeTextLength));
  }
  for (char c : value) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s %s contains byte 0x%02x; use printable ASCII",
                          field, Quote(value), byte));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateAddress(absl::string_view address) {
  if (address.empty()) return absl::OkStatus();
  if (absl::Status status = ValidateFreeText("address", address);
      !status.ok()) {
    return status;
  }
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 ||
      port > 65535 ||
      address.substr(colon + 1).find_first_not_of("0123456789") !=
          absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address ", Quote(address),
        " is not host:port with a port in 1..65535; give where this worker "
        "would host the c10d store, e.g. 10.0.0.5:29500"));
  }
  return absl::OkStatus();
}

// Checks a batch as GetPlan and SubmitBatches need it; `field` names it in
// messages ("batch", "batches[2]").
absl::Status ValidateGlobalBatch(const v1::GlobalBatch& batch,
                                 absl::string_view field) {
  if (batch.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".step = ", batch.step(), "; steps are numbered from 0"));
  }
  if (batch.samples().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".samples is empty (step ", batch.step(),
                     "); give the step's sequences"));
  }
  if (batch.samples_size() > kMaxSamplesPerBatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".samples has ", batch.samples_size(), " sequences; at most ",
        kMaxSamplesPerBatch, " are supported"));
  }
  absl::flat_hash_map<int64_t, int> index_of_id;
  index_of_id.reserve(batch.samples_size());
  for (int i = 0; i < batch.samples_size(); ++i) {
    const v1::Sample& sample = batch.samples(i);
    if (sample.length_tokens() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".samples[", i, "] (id ", sample.id(),
                       ") has length_tokens = ", sample.length_tokens(),
                       "; every sequence needs at least 1 token"));
    }
    if (sample.length_tokens() > kMaxLengthTokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".samples[", i, "] (id ", sample.id(),
          ") has length_tokens = ", sample.length_tokens(), "; at most ",
          kMaxLengthTokens, " tokens are supported"));
    }
    auto [it, inserted] = index_of_id.emplace(sample.id(), i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".samples[", i, "].id = ", sample.id(), " repeats ", field,
          ".samples[", it->second, "].id; ids must be unique within a batch"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFiniteNonNegative(absl::string_view field, double value) {
  if (!std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " = ", value, "; it must be a finite non-negative number"));
  }
  return absl::OkStatus();
}

// Failure to write state. A full disk (RESOURCE_EXHAUSTED) or a read-only
// or foreign directory (PERMISSION_DENIED) keeps its code: retrying cannot
// help until an operator acts. Other I/O errors may pass: UNAVAILABLE, which
// clients retry.
absl::Status PersistError(absl::string_view what, const absl::Status& status) {
  const std::string message =
      absl::StrCat("cannot record ", what, " durably (", status.message(), ")");
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      return absl::ResourceExhaustedError(
          absl::StrCat(message, "; free space in the state directory"));
    case absl::StatusCode::kPermissionDenied:
      return absl::PermissionDeniedError(absl::StrCat(
          message, "; make the state directory writable by the planner"));
    default:
      return absl::UnavailableError(absl::StrCat(message, "; retry later"));
  }
}

// A corrupt or foreign state directory.
absl::Status StateError(absl::string_view key, absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("state file '", key, "' ", why,
                   "; restore the state directory or start with an empty one"));
}

absl::StatusOr<json> ParseJson(absl::string_view key, absl::string_view text) {
  json value = json::parse(text.begin(), text.end(), nullptr,
                           /*allow_exceptions=*/false);
  if (value.is_discarded() || !value.is_object()) {
    return StateError(key, "is not a JSON object");
  }
  return value;
}

// Proto <-> JSON for state files; doubles round-trip exactly (protobuf
// prints them in shortest round-trip form and nlohmann keeps them).
json ProtoToJson(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &text, options);
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

bool ProtoFromJson(const json& value, google::protobuf::Message* message) {
  if (!value.is_object()) return false;
  return google::protobuf::util::JsonStringToMessage(value.dump(), message)
      .ok();
}

std::string SerializeParams(const CostParams& params) {
  return CostParamsToProto(params).SerializeAsString();
}

// Compute time scales linearly with every compute rate's inverse and the
// fixed per-layer time: multiplying all compute time by `factor`.
CostParams ScaleComputeTime(CostParams params, double factor) {
  ComputeParams& compute = params.compute;
  compute.gemm_flops_per_second /= factor;
  compute.attention_forward_flops_per_second /= factor;
  compute.attention_backward_flops_per_second /= factor;
  compute.elementwise_bytes_per_second /= factor;
  compute.layer_fixed_seconds *= factor;
  return params;
}

// What a computed plan predicts per group, for checking reports.
struct GroupSummary {
  double predicted_seconds = 0;
  /// Predicted compute (not communication) seconds of each micro-batch.
  std::vector<double> micro_batch_compute_seconds;
};

// The outcome of planning one step. Immutable once made; shared by every
// request for the step.
struct StepPlan {
  absl::Status status;
  /// The status is transient (the step could not be recorded): not cached.
  bool retry = false;
  std::shared_ptr<const v1::GetPlanResponse> response;
  std::shared_ptr<const std::string> serialized;
  /// The same without sample_ids, for clients that named the batch by its
  /// fingerprint (they hold the batch; this halves the bytes they decode).
  std::shared_ptr<const std::string> serialized_without_sample_ids;
  /// Group index of each rank (-1: none).
  std::vector<int> group_of_rank;
  std::vector<GroupSummary> groups;
  int64_t params_version = 0;
};

using StepPlanFuture = std::shared_future<std::shared_ptr<const StepPlan>>;

struct ParamsVersion {
  std::shared_ptr<const CostModel> cost_model;
  /// Factor the online refit applied to the fitted compute time.
  double compute_correction = 1;
};

struct WorkerState {
  v1::RegisterWorkerRequest registration;
  int node_index = 0;
  int first_rank = 0;
  absl::Time last_seen = absl::InfinitePast();
  /// Has fetched a plan or reported statistics.
  bool active = false;
  int64_t last_step = -1;
  /// This worker's entry in workers.json (one line of JSON) when there is
  /// a state directory, else empty; kept so that a registration does not
  /// re-encode every worker.
  std::string state_entry;
};

struct NodeState {
  std::string name;
  int ranks_used = 0;
};

struct StepRecord {
  uint64_t fingerprint = 0;
  /// Fixed once `persisted`; before that, the version current when planning
  /// starts is taken.
  int64_t params_version = 0;
  bool persisted = false;
  /// The batch from its submission or first request until the step's plan
  /// is cached (also after a failure to record the step), else null.
  std::shared_ptr<const v1::GlobalBatch> batch;
  /// Valid while planning runs or its result is cached.
  StepPlanFuture plan;
};

struct RankReport {
  double step_seconds = 0;
  /// |measured - predicted| / measured, or nullopt without a prediction.
  std::optional<double> relative_error;
  /// predicted (at the refit base) / measured compute seconds of each
  /// micro-batch, counted in the refit sums of `refit_epoch`.
  std::vector<double> compute_ratios;
  int64_t refit_epoch = -1;
};

struct StepStats {
  std::map<int, RankReport> ranks;
  bool imbalance_reported = false;
};

/// The PlannerHandler behind PlannerHandler::Create.
///
/// Thread model: `mu_` guards all state. Planning runs outside it: the first
/// request for a step installs a shared future under `mu_`, then records the
/// step durably and plans it without the lock; every other request for the
/// step waits on the future. A GetPlan for a step whose future exists (by
/// step, or with a batch of the recorded fingerprint) takes `mu_` only to
/// look the future up: it neither validates nor copies the batch. Profile
/// fits run outside `mu_` too, serialized by `profile_mu_` (taken before
/// `mu_`). Writes of shared state files (registrations, parameter versions,
/// profiles) happen under `mu_` so that they land in order; per-step records
/// are written by the planning task. Background planning threads take steps
/// from `queue_`.
class PlannerHandlerImpl final : public PlannerHandler {
 public:
  PlannerHandlerImpl(PlannerHandlerOptions options, const Clock& clock,
                     PlannerMetrics* metrics,
                     std::function<void(const std::string&)> log,
                     std::unique_ptr<StateStore> store,
                     std::shared_ptr<const CostModel> default_model)
      : options_(std::move(options)),
        clock_(clock),
        metrics_(metrics != nullptr ? metrics : &noop_metrics_),
        log_(std::move(log)),
        store_(std::move(store)),
        world_size_(options_.cluster.NumGpus()),
        default_params_(default_model->params()) {
    versions_[0] = ParamsVersion{std::move(default_model), 1};
    fitted_params_ = default_params_;
  }

  ~PlannerHandlerImpl() override { Shutdown(); }

  absl::Status Load() ABSL_LOCKS_EXCLUDED(mu_);
  void StartThreads() ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) override;
  absl::StatusOr<v1::SubmitProfileResponse> SubmitProfile(
      const v1::SubmitProfileRequest& request) override;
  absl::StatusOr<v1::SubmitBatchesResponse> SubmitBatches(
      const v1::SubmitBatchesRequest& request) override;
  absl::StatusOr<v1::GetPlanResponse> GetPlan(
      const v1::GetPlanRequest& request) override;
  absl::StatusOr<std::shared_ptr<const std::string>> GetSerializedPlan(
      const v1::GetPlanRequest& request) override;
  absl::StatusOr<v1::ReportStepStatsResponse> ReportStepStats(
      const v1::ReportStepStatsRequest& request) override;
  absl::StatusOr<v1::GetClusterModelResponse> GetClusterModel(
      const v1::GetClusterModelRequest& request) override;
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& request) override;
  void Shutdown() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Log(const std::string& line) const {
    if (log_) log_(line);
  }
  absl::Status Persist(absl::string_view key, absl::string_view bytes) const {
    if (store_ == nullptr) return absl::OkStatus();
    return store_->Write(key, bytes);
  }

  // Loading (before any other call).
  absl::Status LoadJob() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadWorkers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Every stored (key, value) whose key starts with `prefix`, in key order.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadAll(
      absl::string_view prefix) const;
  absl::Status LoadParams() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadProfiles() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadSteps() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Registration.
  bool WorldComplete() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string WaitingFor() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string RendezvousAddress() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One worker's entry in workers.json, and the whole file (every
  // worker's `state_entry`).
  static std::string WorkerStateEntry(const WorkerState& worker);
  std::string WorkersJson() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckBackend(const v1::RegisterWorkerRequest& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::RegisterWorkerResponse RegistrationResponse(
      const WorkerState& worker) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks a call from `worker_id` (empty: anonymous); NOT_FOUND if unknown.
  /// SubmitProfile's answer: the current fit's reports and version.
  v1::SubmitProfileResponse ProfileResponse() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Touch(absl::string_view worker_id, bool activity, int64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Parameters.
  int64_t CurrentVersion() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return versions_.rbegin()->first;
  }
  // Makes and persists a new version with these parameters.
  absl::StatusOr<int64_t> AddVersion(const CostParams& params,
                                     double compute_correction)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeRefit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Planning.
  absl::StatusOr<std::shared_ptr<const StepPlan>> PlanStep(
      std::shared_ptr<const v1::GlobalBatch> batch, uint64_t fingerprint)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<const StepPlan> ComputePlan(
      const v1::GlobalBatch& batch, uint64_t fingerprint,
      int64_t params_version, std::shared_ptr<const CostModel> cost_model,
      bool record) const;
  void FinishPlanning(int64_t step, const StepPlan& result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckFingerprint(int64_t step, uint64_t fingerprint) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Touches the worker and checks that plans can be served (the world is
  // complete).
  absl::Status CheckCanServe(absl::string_view worker_id, int64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static absl::StatusOr<std::shared_ptr<const StepPlan>> AwaitPlan(
      const StepPlanFuture& future);
  // GetPlan: with the batch's samples, or by step (PlanForStep).
  absl::StatusOr<std::shared_ptr<const StepPlan>> PlanForRequest(
      const v1::GetPlanRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::shared_ptr<const StepPlan>> PlanForStep(
      const v1::GetPlanRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  void BackgroundLoop() ABSL_LOCKS_EXCLUDED(mu_);

  const PlannerHandlerOptions options_;
  const Clock& clock_;
  NoopPlannerMetrics noop_metrics_;
  PlannerMetrics* const metrics_;
  const std::function<void(const std::string&)> log_;
  /// Null when state is kept in memory only.
  const std::unique_ptr<StateStore> store_;
  const int world_size_;
  const CostParams default_params_;

  mutable absl::Mutex mu_;
  /// Serializes profile fits (which run outside mu_); taken before mu_.
  absl::Mutex profile_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  // Registration: nodes in order of first registration (index = node
  // index); every worker's ranks lie inside its node's block.
  std::map<std::string, WorkerState> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<NodeState> nodes_ ABSL_GUARDED_BY(mu_);

  // Parameters: every version made so far (0 = defaults); the last is
  // current. `fitted_params_` is the latest profile fit (defaults before
  // any), which online corrections scale.
  std::map<int64_t, ParamsVersion> versions_ ABSL_GUARDED_BY(mu_);
  CostParams fitted_params_ ABSL_GUARDED_BY(mu_);
  std::vector<ModelFitReport> reports_ ABSL_GUARDED_BY(mu_);
  // Profiles by slot (order of each worker's first submission), shared so
  // that a fit can take a snapshot cheaply. `profiles_generation_` counts
  // changes to them; `fitted_generation_` is the generation the current fit
  // covers (both 0 after loading: the loaded parameters fit the loaded
  // profiles).
  std::vector<std::shared_ptr<const v1::SubmitProfileRequest>> profiles_
      ABSL_GUARDED_BY(mu_);
  int64_t profiles_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fitted_generation_ ABSL_GUARDED_BY(mu_) = 0;

  // Steps ever planned or submitted, and the set of steps whose finished
  // plan is cached (evicted smallest first).
  std::map<int64_t, StepRecord> steps_ ABSL_GUARDED_BY(mu_);
  std::set<int64_t> cached_steps_ ABSL_GUARDED_BY(mu_);
  /// Steps whose StepRecord holds a batch that is not planned yet.
  std::set<int64_t> pending_steps_ ABSL_GUARDED_BY(mu_);

  // Measurements per step (for steps whose plan is cached).
  std::map<int64_t, StepStats> stats_ ABSL_GUARDED_BY(mu_);
  double relative_error_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t relative_error_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Online refit: sums of r and r^2 over micro-batch ratios r = predicted
  // (at the fitted parameters) / measured compute seconds, for steps planned
  // with versions >= `refit_epoch_` (the version of the latest profile fit).
  // The least-squares factor minimising sum (1 - f r)^2 is sum r / sum r^2.
  int64_t refit_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  double refit_ratio_sum_ ABSL_GUARDED_BY(mu_) = 0;
  double refit_ratio_squared_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refit_count_ ABSL_GUARDED_BY(mu_) = 0;

  // Background planning.
  std::deque<int64_t> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar queue_cv_;
  std::vector<std::thread> threads_;  // started by StartThreads, joined once
  absl::Mutex threads_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

// ---------------------------------------------------------------------------
// Loading.

absl::Status PlannerHandlerImpl::Load() {
  if (store_ == nullptr) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  for (auto load :
       {&PlannerHandlerImpl::LoadJob, &PlannerHandlerImpl::LoadWorkers,
        &PlannerHandlerImpl::LoadParams, &PlannerHandlerImpl::LoadProfiles,
        &PlannerHandlerImpl::LoadSteps}) {
    if (absl::Status status = (this->*load)(); !status.ok()) return status;
  }
  return absl::OkStatus();
}

/// What in `options` decides plans (besides the model, cluster and
/// parameters), for job.json.
json PlannerOptionsJson(const PlannerOptions& options) {
  return {{"variable_accumulation", options.variable_accumulation},
          {"pyramid_recompute", options.pyramid_recompute},
          {"sp_sizes", options.sp_sizes},
          {"strategy_name", options.strategy_name},
          {"static_workload_max_length_tokens",
           options.static_options.workload_max_length_tokens},
          {"static_micro_batch_sequences",
           options.static_options.micro_batch_sequences},
          {"static_sp_size", options.static_options.sp_size}};
}

absl::Status PlannerHandlerImpl::LoadJob() {
  json job = {{"model", json::parse(ModelSpecToJson(options_.model))},
              {"cluster", json::parse(ClusterSpecToJson(options_.cluster))},
              {"planner", PlannerOptionsJson(options_.planner_options)}};
  absl::StatusOr<std::optional<std::string>> stored = store_->Read(kJobKey);
  if (!stored.ok()) return stored.status();
  if (!stored->has_value()) {
    job[kFingerprintVersionField] = kBatchFingerprintVersion;
    if (absl::Status status = store_->Write(kJobKey, job.dump(2));
        !status.ok()) {
      return status;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<json> previous = ParseJson(kJobKey, **stored);
  if (!previous.ok()) return previous.status();
  // Step records hold fingerprints of the version the directory was started
  // with; they cannot be compared with another version's.
  int fingerprint_version = 1;
  if (auto field = previous->find(kFingerprintVersionField);
      field != previous->end()) {
    if (!field->is_number_integer()) {
      return StateError(kJobKey, absl::StrCat("has a non-integer ",
                                              kFingerprintVersionField));
    }
    fingerprint_version = field->get<int>();
    previous->erase(field);
  }
  if (fingerprint_version != kBatchFingerprintVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state directory '", store_->directory(),
        "' records batch fingerprints of version ", fingerprint_version,
        " but this planner computes version ", kBatchFingerprintVersion,
        " (see planner/service/batch_fingerprint.h), so its steps' batches "
        "cannot be checked; start with a fresh state_dir (or run the planner "
        "release that wrote it)"));
  }
  // Directories from before the planner options were recorded were
  // written with the defaults (dcp_planner has no flags for them).
  if (!previous->contains("planner")) {
    (*previous)["planner"] = PlannerOptionsJson(PlannerOptions());
  }
  if (*previous != job) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state directory '", store_->directory(),
        "' belongs to a different job (its model, cluster or planner options "
        "differ: ",
        previous->dump(), " vs ", job.dump(),
        "); use a fresh state_dir for a new job"));
  }
  return absl::OkStatus();
}

absl::Status PlannerHandlerImpl::LoadWorkers() {
  absl::StatusOr<std::optional<std::string>> stored = store_->Read(kWorkersKey);
  if (!stored.ok()) return stored.status();
  if (!stored->has_value()) return absl::OkStatus();
  absl::StatusOr<json> doc = ParseJson(kWorkersKey, **stored);
  if (!doc.ok()) return doc.status();
  const json& list = (*doc)["workers"];
  if (!list.is_array()) return StateError(kWorkersKey, "has no worker list");
  const int per_node = options_.cluster.gpus_per_node;
  std::vector<std::optional<NodeState>> nodes(options_.cluster.num_nodes);
  for (const json& entry : list) {
    WorkerState worker;
    if (!entry.is_object() ||
        !ProtoFromJson(entry.value("registration", json()),
                       &worker.registration) ||
        !entry.value("node_index", json()).is_number_integer() ||
        !entry.value("first_rank", json()).is_number_integer()) {
      return StateError(kWorkersKey, "has a malformed worker entry");
    }
    worker.node_index = entry["node_index"].get<int>();
    worker.first_rank = entry["first_rank"].get<int>();
    worker.last_seen = clock_.Now();
    const v1::RegisterWorkerRequest& registration = worker.registration;
    const int offset = worker.first_rank - worker.node_index * per_node;
    if (worker.node_index < 0 ||
        worker.node_index >= options_.cluster.num_nodes ||
        registration.num_ranks() < 1 || offset < 0 ||
        offset + registration.num_ranks() > per_node ||
        workers_.count(registration.worker_id()) > 0) {
      return StateError(
          kWorkersKey,
          absl::StrCat("places worker ", Quote(registration.worker_id()),
                       " outside the cluster"));
    }
    std::optional<NodeState>& node = nodes[worker.node_index];
    if (!node.has_value()) node = NodeState{registration.node_name(), 0};
    if (node->name != registration.node_name()) {
      return StateError(kWorkersKey, "puts two node names in one node slot");
    }
    node->ranks_used += registration.num_ranks();
    worker.state_entry = WorkerStateEntry(worker);
    workers_[registration.worker_id()] = std::move(worker);
  }
  for (const std::optional<NodeState>& node : nodes) {
    if (!node.has_value()) break;
    nodes_.push_back(*node);
  }
  if (nodes_.size() != static_cast<size_t>(std::count_if(
                           nodes.begin(), nodes.end(), [](const auto& node) {
                             return node.has_value();
                           }))) {
    return StateError(kWorkersKey, "leaves a gap between node slots");
  }
  // Ranks of a node must be contiguous from the node's first rank.
  std::vector<std::vector<std::pair<int, int>>> spans(nodes_.size());
  for (const auto& [id, worker] : workers_) {
    spans[worker.node_index].push_back(
        {worker.first_rank, worker.registration.num_ranks()});
  }
  for (size_t n = 0; n < spans.size(); ++n) {
    std::sort(spans[n].begin(), spans[n].end());
    int next = static_cast<int>(n) * per_node;
    for (const auto& [first, count] : spans[n]) {
      if (first != next) {
        return StateError(kWorkersKey, "has overlapping or gapped ranks");
      }
      next += count;
    }
  }
  metrics_->RegisteredWorkers(static_cast<int>(workers_.size()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
PlannerHandlerImpl::ReadAll(absl::string_view prefix) const {
  absl::StatusOr<std::vector<std::string>> keys = store_->List(prefix);
  if (!keys.ok()) return keys.status();
  std::vector<std::pair<std::string, std::string>> values;
  for (const std::string& key : *keys) {
    absl::StatusOr<std::optional<std::string>> stored = store_->Read(key);
    if (!stored.ok()) return stored.status();
    if (!stored->has_value()) continue;  // removed since listed
    values.emplace_back(key, **std::move(stored));
  }
  return values;
}

absl::Status PlannerHandlerImpl::LoadParams() {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> stored =
      ReadAll(kParamsPrefix);
  if (!stored.ok()) return stored.status();
  for (const auto& [key, bytes] : *stored) {
    absl::StatusOr<json> doc = ParseJson(key, bytes);
    if (!doc.ok()) return doc.status();
    v1::CostParams params;
    v1::CostParams fitted;
    const json& version = (*doc)["params_version"];
    const json& correction = (*doc)["compute_correction"];
    if (!version.is_number_integer() || version.get<int64_t>() < 1 ||
        !correction.is_number() || !ProtoFromJson((*doc)["params"], &params) ||
        !ProtoFromJson((*doc)["fitted_params"], &fitted) ||
        !(*doc)["reports"].is_array()) {
      return StateError(key, "is not a parameter version");
    }
    absl::StatusOr<CostModel> cost_model = CostModel::Create(
        options_.model, options_.cluster, CostParamsFromProto(params));
    if (!cost_model.ok()) return StateError(key, cost_model.status().message());
    versions_[version.get<int64_t>()] =
        ParamsVersion{std::make_shared<const CostModel>(*std::move(cost_model)),
                      correction.get<double>()};
    // The last (highest) version sets the current fit.
    fitted_params_ = CostParamsFromProto(fitted);
    reports_.clear();
    for (const json& report_json : (*doc)["reports"]) {
      v1::FitReport report;
      if (!ProtoFromJson(report_json, &report)) {
        return StateError(key, "has a malformed fit report");
      }
      reports_.push_back(FitReportFromProto(report));
    }
    if ((*doc)["refit_epoch"].is_number_integer()) {
      refit_epoch_ = (*doc)["refit_epoch"].get<int64_t>();
    }
  }
  return absl::OkStatus();
}

absl::Status PlannerHandlerImpl::LoadProfiles() {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> stored =
      ReadAll(kProfilePrefix);
  if (!stored.ok()) return stored.status();
  for (const auto& [key, bytes] : *stored) {
    auto profile = std::make_shared<v1::SubmitProfileRequest>();
    if (!profile->ParseFromString(bytes)) {
      return StateError(key, "is not a profile");
    }
    profiles_.push_back(std::move(profile));
  }
  return absl::OkStatus();
}

absl::Status PlannerHandlerImpl::LoadSteps() {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> stored =
      ReadAll(kStepPrefix);
  if (!stored.ok()) return stored.status();
  for (const auto& [key, bytes] : *stored) {
    absl::StatusOr<json> doc = ParseJson(key, bytes);
    if (!doc.ok()) return doc.status();
    const json& step = (*doc)["step"];
    const json& fingerprint = (*doc)["fingerprint"];
    const json& version = (*doc)["params_version"];
    uint64_t fingerprint_value = 0;
    if (!step.is_number_integer() || !fingerprint.is_string() ||
        !version.is_number_integer() ||
        !absl::SimpleHexAtoi(fingerprint.get<std::string>(),
                             &fingerprint_value)) {
      return StateError(key, "is not a step record");
    }
    if (versions_.count(version.get<int64_t>()) == 0) {
      return StateError(
          key, absl::StrCat("refers to parameter version ",
                            version.get<int64_t>(), ", which is missing"));
    }
    StepRecord& record = steps_[step.get<int64_t>()];
    record.fingerprint = fingerprint_value;
    record.params_version = version.get<int64_t>();
    record.persisted = true;
  }
  return absl::OkStatus();
}

void PlannerHandlerImpl::StartThreads() {
  absl::MutexLock threads_lock(&threads_mu_);
  for (int i = 0; i < options_.background_planning_threads; ++i) {
    threads_.emplace_back([this] { BackgroundLoop(); });
  }
}

void PlannerHandlerImpl::Shutdown() {
  absl::MutexLock threads_lock(&threads_mu_);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
    queue_cv_.SignalAll();
  }
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
}

void PlannerHandlerImpl::BackgroundLoop() {
  while (true) {
    std::shared_ptr<const v1::GlobalBatch> batch;
    uint64_t fingerprint = 0;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) queue_cv_.Wait(&mu_);
      if (stopping_) return;
      const int64_t step = queue_.front();
      queue_.pop_front();
      auto it = steps_.find(step);
      if (it == steps_.end() || it->second.plan.valid() ||
          it->second.batch == nullptr) {
        continue;  // already planned or planning
      }
      batch = it->second.batch;
      fingerprint = it->second.fingerprint;
    }
    // Errors reach whoever asks for the step's plan.
    (void)PlanStep(std::move(batch), fingerprint);
  }
}

// ---------------------------------------------------------------------------
// Registration.

bool PlannerHandlerImpl::WorldComplete() const {
  if (static_cast<int>(nodes_.size()) < options_.cluster.num_nodes) {
    return false;
  }
  for (const NodeState& node : nodes_) {
    if (node.ranks_used < options_.cluster.gpus_per_node) return false;
  }
  return true;
}

std::string PlannerHandlerImpl::WaitingFor() const {
  if (WorldComplete()) return "";
  const int num_nodes = options_.cluster.num_nodes;
  const int per_node = options_.cluster.gpus_per_node;
  int ranks = 0;
  for (const NodeState& node : nodes_) ranks += node.ranks_used;
  std::string text =
      absl::StrCat(nodes_.size(), " of ", num_nodes, " nodes, ", ranks, " of ",
                   world_size_, " ranks registered");
  if (static_cast<int>(nodes_.size()) < num_nodes) {
    std::vector<int> missing;
    for (int n = static_cast<int>(nodes_.size()); n < num_nodes; ++n) {
      if (missing.size() == 8) break;
      missing.push_back(n);
    }
    const int count = num_nodes - static_cast<int>(nodes_.size());
    absl::StrAppend(&text, "; missing node slot", count > 1 ? "s " : " ",
                    absl::StrJoin(missing, ", "),
                    count > 8 ? absl::StrCat(", ... (", count, " slots)") : "");
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].ranks_used < per_node) {
      absl::StrAppend(&text, "; node ", Quote(nodes_[n].name), " (slot ", n,
                      ") has ", nodes_[n].ranks_used, " of ", per_node,
                      " ranks");
    }
  }
  return text;
}

std::string PlannerHandlerImpl::RendezvousAddress() const {
  for (const auto& [id, worker] : workers_) {
    if (worker.first_rank == 0) return worker.registration.address();
  }
  return "";
}

std::string PlannerHandlerImpl::WorkerStateEntry(const WorkerState& worker) {
  return json{{"registration", ProtoToJson(worker.registration)},
              {"node_index", worker.node_index},
              {"first_rank", worker.first_rank}}
      .dump();
}

std::string PlannerHandlerImpl::WorkersJson() const {
  std::string text = "{\n  \"workers\": [";
  const char* separator = "\n    ";
  for (const auto& [id, worker] : workers_) {
    absl::StrAppend(&text, separator, worker.state_entry);
    separator = ",\n    ";
  }
  absl::StrAppend(&text, workers_.empty() ? "]\n}\n" : "\n  ]\n}\n");
  return text;
}

absl::Status PlannerHandlerImpl::CheckBackend(
    const v1::RegisterWorkerRequest& request) const {
  if (request.backend().empty()) return absl::OkStatus();
  for (const auto& [id, worker] : workers_) {
    const std::string& other = worker.registration.backend();
    if (id != request.worker_id() && !other.empty() &&
        other != request.backend()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", Quote(request.worker_id()), " uses backend ",
          Quote(request.backend()), " but worker ", Quote(id), " uses ",
          Quote(other), "; every worker of a job must use the same backend"));
    }
  }
  return absl::OkStatus();
}

v1::RegisterWorkerResponse PlannerHandlerImpl::RegistrationResponse(
    const WorkerState& worker) const {
  v1::RegisterWorkerResponse response;
  response.set_first_rank(worker.first_rank);
  response.set_num_ranks(worker.registration.num_ranks());
  response.set_node_index(worker.node_index);
  response.set_world_size(world_size_);
  response.set_world_complete(WorldComplete());
  response.set_rendezvous_address(RendezvousAddress());
  *response.mutable_model() = ModelSpecToProto(options_.model);
  *response.mutable_cluster() = ClusterSpecToProto(options_.cluster);
  response.set_waiting_for(WaitingFor());
  return response;
}

absl::StatusOr<v1::RegisterWorkerResponse> PlannerHandlerImpl::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  const int per_node = options_.cluster.gpus_per_node;
  if (absl::Status status =
          ValidateIdentifier("worker_id", request.worker_id(), "the pod name");
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          ValidateIdentifier("node_name", request.node_name(), "the host name");
      !status.ok()) {
    return status;
  }
  if (request.num_ranks() < 1 || request.num_ranks() > per_node) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_ranks = ", request.num_ranks(), " for worker ",
        Quote(request.worker_id()), "; it must be in [1, ", per_node,
        "] (the cluster has ", per_node, " GPUs per node)"));
  }
  if (request.backend() != "" && request.backend() != "gloo" &&
      request.backend() != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend ", Quote(request.backend()), " for worker ",
        Quote(request.worker_id()),
        " is not supported; use \"gloo\" (CPU) or \"nccl\" (GPU)"));
  }
  if (request.gpu_memory_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_memory_bytes = ", request.gpu_memory_bytes(),
                     " for worker ", Quote(request.worker_id()),
                     "; give the GPU's total memory, or 0 if unknown"));
  }
  if (absl::Status status = ValidateAddress(request.address()); !status.ok()) {
    return status;
  }
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"gpu_kind",
                                                   &request.gpu_kind()},
        {"libtorch_version", &request.libtorch_version()}}) {
    if (absl::Status status = ValidateFreeText(field, *value); !status.ok()) {
      return status;
    }
  }

  absl::MutexLock lock(&mu_);
  if (absl::Status status = CheckBackend(request); !status.ok()) return status;
  // The registration is applied to `workers_` in place and undone if it
  // cannot be recorded: no copy of the worker map per call.
  auto existing = workers_.find(request.worker_id());
  const bool is_new = existing == workers_.end();
  bool new_node = false;
  std::optional<WorkerState> before;
  if (!is_new) {
    WorkerState& worker = existing->second;
    const v1::RegisterWorkerRequest& registered = worker.registration;
    if (registered.node_name() != request.node_name() ||
        registered.num_ranks() != request.num_ranks()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", Quote(request.worker_id()), " registered before on node ",
          Quote(registered.node_name()), " with ", registered.num_ranks(),
          " ranks and now comes from node ", Quote(request.node_name()),
          " with ", request.num_ranks(),
          "; a worker id keeps its node and ranks for the whole job (use a "
          "new worker id, or restart the job with a fresh state_dir)"));
    }
    worker.last_seen = clock_.Now();
    if (registered.SerializeAsString() == request.SerializeAsString()) {
      return RegistrationResponse(worker);
    }
    before = worker;
    worker.registration = request;  // new address, versions...
  } else {
    auto node = std::find_if(
        nodes_.begin(), nodes_.end(),
        [&](const NodeState& n) { return n.name == request.node_name(); });
    const int node_index = static_cast<int>(node - nodes_.begin());
    if (node == nodes_.end()) {
      if (static_cast<int>(nodes_.size()) >= options_.cluster.num_nodes) {
        std::vector<std::string> names;
        for (const NodeState& n : nodes_) names.push_back(Quote(n.name));
        return absl::ResourceExhaustedError(absl::StrCat(
            "worker ", Quote(request.worker_id()), " is on node ",
            Quote(request.node_name()), " but all ", options_.cluster.num_nodes,
            " node slots are taken by ", absl::StrJoin(names, ", "),
            "; run it on one of those nodes or plan for more nodes"));
      }
      new_node = true;
    } else if (node->ranks_used + request.num_ranks() > per_node) {
      std::vector<std::string> holders;
      for (const auto& [id, worker] : workers_) {
        if (worker.node_index == node_index) holders.push_back(Quote(id));
      }
      return absl::ResourceExhaustedError(absl::StrCat(
          "node ", Quote(request.node_name()), " has ", node->ranks_used,
          " of its ", per_node, " ranks taken by ",
          absl::StrJoin(holders, ", "), "; worker ", Quote(request.worker_id()),
          " asks for ", request.num_ranks(), " more"));
    }
    WorkerState worker;
    worker.registration = request;
    worker.node_index = node_index;
    worker.first_rank =
        node_index * per_node + (new_node ? 0 : node->ranks_used);
    worker.last_seen = clock_.Now();
    existing = workers_.emplace(request.worker_id(), std::move(worker)).first;
  }
  WorkerState& worker = existing->second;
  if (store_ != nullptr) {
    worker.state_entry = WorkerStateEntry(worker);
    if (absl::Status status = Persist(kWorkersKey, WorkersJson());
        !status.ok()) {
      if (is_new) {
        workers_.erase(existing);
      } else {
        worker = *std::move(before);
      }
      return PersistError("the registration", status);
    }
  }
  if (is_new) {
    if (new_node) {
      nodes_.push_back(NodeState{request.node_name(), 0});
    }
    nodes_[worker.node_index].ranks_used += request.num_ranks();
    metrics_->RegisteredWorkers(static_cast<int>(workers_.size()));
    Log(absl::StrCat("worker ", request.worker_id(), " on node ",
                     request.node_name(), " (slot ", worker.node_index,
                     "): ranks ", worker.first_rank, "..",
                     worker.first_rank + request.num_ranks() - 1,
                     WorldComplete() ? "; world complete"
                                     : absl::StrCat("; ", WaitingFor())));
    if (request.gpu_memory_bytes() > 0 &&
        request.gpu_memory_bytes() < 0.98 * options_.cluster.gpu_memory_bytes) {
      Log(absl::StrCat("warning: worker ", request.worker_id(), " has ",
                       request.gpu_memory_bytes(),
                       " bytes of GPU memory; plans assume ",
                       options_.cluster.gpu_memory_bytes));
    }
  }
  return RegistrationResponse(worker);
}

absl::Status PlannerHandlerImpl::Touch(absl::string_view worker_id,
                                       bool activity, int64_t step) {
  if (worker_id.empty()) return absl::OkStatus();
  auto it = workers_.find(std::string(worker_id));
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker_id ", Quote(worker_id),
                     " is not registered; call RegisterWorker first"));
  }
  it->second.last_seen = clock_.Now();
  if (activity) {
    it->second.active = true;
    it->second.last_step = std::max(it->second.last_step, step);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Profiles and parameters.

absl::StatusOr<int64_t> PlannerHandlerImpl::AddVersion(
    const CostParams& params, double compute_correction) {
  absl::StatusOr<CostModel> cost_model =
      CostModel::Create(options_.model, options_.cluster, params);
  if (!cost_model.ok()) return cost_model.status();
  const int64_t version = CurrentVersion() + 1;
  json reports = json::array();
  for (const ModelFitReport& report : reports_) {
    reports.push_back(ProtoToJson(FitReportToProto(report)));
  }
  const json doc = {
      {"params_version", version},
      {"compute_correction", compute_correction},
      {"refit_epoch", refit_epoch_},
      {"params", ProtoToJson(CostParamsToProto(params))},
      {"fitted_params", ProtoToJson(CostParamsToProto(fitted_params_))},
      {"reports", reports}};
  if (absl::Status status = Persist(ParamsKey(version), doc.dump(2));
      !status.ok()) {
    return PersistError(absl::StrCat("parameter version ", version), status);
  }
  versions_[version] =
      ParamsVersion{std::make_shared<const CostModel>(*std::move(cost_model)),
                    compute_correction};
  return version;
}

v1::SubmitProfileResponse PlannerHandlerImpl::ProfileResponse() const {
  v1::SubmitProfileResponse response;
  for (const ModelFitReport& report : reports_) {
    *response.add_reports() = FitReportToProto(report);
  }
  response.set_params_version(CurrentVersion());
  return response;
}

absl::StatusOr<v1::SubmitProfileResponse> PlannerHandlerImpl::SubmitProfile(
    const v1::SubmitProfileRequest& request) {
  if (absl::Status status =
          ValidateIdentifier("worker_id", request.worker_id(), "the pod name");
      !status.ok()) {
    return status;
  }
  if (request.samples().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("samples is empty (worker ", Quote(request.worker_id()),
                     "); send the worker's micro-benchmark measurements"));
  }
  if (request.samples_size() > kMaxProfileSamples) {
    return absl::InvalidArgumentError(
        absl::StrCat("samples has ", request.samples_size(),
                     " entries; send at most ", kMaxProfileSamples));
  }
  absl::StatusOr<std::vector<ProfileSample>> own_samples =
      ProfileSamplesFromProto(request.samples());
  if (!own_samples.ok()) return own_samples.status();
  // Validates the request's samples on their own, so that errors name the
  // index in this request.
  if (absl::StatusOr<CostModelFit> own_fit = FitCostModel(
          options_.model, options_.cluster, default_params_, *own_samples);
      !own_fit.ok()) {
    return own_fit.status();
  }

  // Record the profile (replacing this worker's earlier one) before any fit.
  int64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    // One profile per registered worker: a stale or mistyped id must not
    // add a slot that every later fit would count.
    if (absl::Status status = Touch(request.worker_id(), /*activity=*/false,
                                    /*step=*/-1);
        !status.ok()) {
      return status;
    }
    int slot = static_cast<int>(profiles_.size());
    for (size_t i = 0; i < profiles_.size(); ++i) {
      if (profiles_[i]->worker_id() == request.worker_id()) {
        slot = static_cast<int>(i);
      }
    }
    const std::string bytes = request.SerializeAsString();
    const bool unchanged = slot < static_cast<int>(profiles_.size()) &&
                           profiles_[slot]->SerializeAsString() == bytes;
    if (!unchanged) {
      if (absl::Status status = Persist(ProfileKey(slot), bytes);
          !status.ok()) {
        return PersistError("the profile", status);
      }
      auto stored = std::make_shared<const v1::SubmitProfileRequest>(request);
      if (slot == static_cast<int>(profiles_.size())) {
        profiles_.push_back(std::move(stored));
      } else {
        profiles_[slot] = std::move(stored);
      }
      ++profiles_generation_;
    }
    generation = profiles_generation_;
  }

  // One fit at a time over every profile recorded so far. When many
  // workers submit at once (every rank at startup), the fit that runs next
  // covers all of theirs, and they need not fit again: the number of fits
  // grows with how long fits take, not with the number of workers.
  absl::MutexLock profile_lock(&profile_mu_);
  std::vector<std::shared_ptr<const v1::SubmitProfileRequest>> profiles;
  int64_t snapshot_generation = 0;
  {
    absl::MutexLock lock(&mu_);
    if (fitted_generation_ >= generation) return ProfileResponse();
    profiles = profiles_;
    snapshot_generation = profiles_generation_;
  }
  std::vector<ProfileSample> samples;
  for (const auto& profile : profiles) {
    absl::StatusOr<std::vector<ProfileSample>> converted =
        ProfileSamplesFromProto(profile->samples());
    if (!converted.ok()) return converted.status();  // validated when stored
    samples.insert(samples.end(), converted->begin(), converted->end());
  }
  absl::StatusOr<CostModelFit> fit =
      FitCostModel(options_.model, options_.cluster, default_params_, samples);
  if (!fit.ok()) return fit.status();

  absl::MutexLock lock(&mu_);
  // Against the previous fit: an unchanged fit keeps any online correction.
  const bool params_changed =
      SerializeParams(fit->params) != SerializeParams(fitted_params_);
  const std::vector<ModelFitReport> previous_reports = reports_;
  const CostParams previous_fitted = fitted_params_;
  reports_ = fit->reports;
  fitted_params_ = fit->params;
  if (params_changed) {
    // A new fit is a new baseline: online corrections start over from it.
    const int64_t previous_epoch = refit_epoch_;
    refit_epoch_ = CurrentVersion() + 1;
    absl::StatusOr<int64_t> version =
        AddVersion(fit->params, /*compute_correction=*/1);
    if (!version.ok()) {
      reports_ = previous_reports;
      fitted_params_ = previous_fitted;
      refit_epoch_ = previous_epoch;
      return version.status();
    }
    refit_ratio_sum_ = 0;
    refit_ratio_squared_sum_ = 0;
    refit_count_ = 0;
  }
  fitted_generation_ = snapshot_generation;
  std::vector<std::string> summary;
  for (const ModelFitReport& report : reports_) {
    summary.push_back(report.used_defaults
                          ? absl::StrCat(report.name, " defaults")
                          : absl::StrFormat("%s rms %.1f%%", report.name,
                                            100 * report.rms_relative_error));
  }
  Log(absl::StrCat("profiles fitted: ", samples.size(), " samples from ",
                   profiles.size(), " workers (after worker ",
                   request.worker_id(), "'s ", request.samples_size(),
                   "); params v", CurrentVersion(), "; ",
                   absl::StrJoin(summary, ", ")));
  return ProfileResponse();
}

void PlannerHandlerImpl::MaybeRefit() {
  if (!options_.online_refit || refit_count_ < kMinRefitObservations ||
      refit_ratio_squared_sum_ <= 0) {
    return;
  }
  // Finite: every ratio summed lies in [1 / kMaxRefitRatio, kMaxRefitRatio].
  const double factor =
      std::clamp(refit_ratio_sum_ / refit_ratio_squared_sum_,
                 kMinComputeCorrection, kMaxComputeCorrection);
  const double current = versions_.rbegin()->second.compute_correction;
  if (std::abs(factor / current - 1) <= kRefitChangeThreshold) return;
  absl::StatusOr<int64_t> version =
      AddVersion(ScaleComputeTime(fitted_params_, factor), factor);
  if (!version.ok()) {
    Log(absl::StrCat("online refit not applied: ", version.status().message()));
    return;
  }
  Log(absl::StrFormat(
      "params v%d: online refit scales compute time by %.3f (was %.3f) from "
      "%d micro-batch measurements",
      *version, factor, current, refit_count_));
}

// ---------------------------------------------------------------------------
// Planning.

absl::Status PlannerHandlerImpl::CheckFingerprint(int64_t step,
                                                  uint64_t fingerprint) const {
  auto it = steps_.find(step);
  if (it != steps_.end() && it->second.fingerprint != fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step,
        " was submitted or planned with a different batch (fingerprint ",
        Hex(it->second.fingerprint), " != ", Hex(fingerprint),
        "); a step's batch must not change"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const StepPlan>> PlannerHandlerImpl::PlanStep(
    std::shared_ptr<const v1::GlobalBatch> batch, uint64_t fingerprint) {
  const int64_t step = batch->step();
  std::promise<std::shared_ptr<const StepPlan>> promise;
  StepPlanFuture future;
  bool plan_here = false;
  bool record = false;
  int64_t params_version = 0;
  std::shared_ptr<const CostModel> cost_model;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status status = CheckFingerprint(step, fingerprint);
        !status.ok()) {
      return status;
    }
    StepRecord& entry = steps_[step];
    entry.fingerprint = fingerprint;
    if (!entry.plan.valid()) {
      // Kept until the plan is cached, so that a request by step can plan
      // again after a failure to record the step.
      if (entry.batch == nullptr) entry.batch = batch;
      pending_steps_.insert(step);
      if (!entry.persisted) entry.params_version = CurrentVersion();
      future = promise.get_future().share();
      entry.plan = future;
      plan_here = true;
      record = !entry.persisted;
      params_version = entry.params_version;
      cost_model = versions_.at(params_version).cost_model;
    } else {
      future = entry.plan;
    }
  }
  if (plan_here) {
    std::shared_ptr<const StepPlan> result = ComputePlan(
        *batch, fingerprint, params_version, std::move(cost_model), record);
    {
      absl::MutexLock lock(&mu_);
      FinishPlanning(step, *result);
    }
    promise.set_value(result);
  }
  std::shared_ptr<const StepPlan> result = future.get();
  if (!result->status.ok()) return result->status;
  return result;
}

std::shared_ptr<const StepPlan> PlannerHandlerImpl::ComputePlan(
    const v1::GlobalBatch& batch, uint64_t fingerprint, int64_t params_version,
    std::shared_ptr<const CostModel> cost_model, bool record) const {
  auto result = std::make_shared<StepPlan>();
  result->params_version = params_version;
  const int64_t step = batch.step();
  if (record) {
    const json doc = {{"step", step},
                      {"fingerprint", Hex(fingerprint)},
                      {"params_version", params_version},
                      {"num_samples", batch.samples_size()}};
    if (absl::Status status = Persist(StepKey(step), doc.dump(2));
        !status.ok()) {
      result->status = PersistError(absl::StrCat("step ", step), status);
      result->retry = true;
      return result;
    }
  }
  const absl::Time start = clock_.Now();
  std::vector<int64_t> lengths;
  lengths.reserve(batch.samples_size());
  for (const v1::Sample& sample : batch.samples()) {
    lengths.push_back(sample.length_tokens());
  }
  absl::StatusOr<Plan> plan =
      Planner(*cost_model, options_.planner_options).PlanBatch(lengths);
  if (!plan.ok()) {
    result->status = absl::Status(
        plan.status().code(),
        absl::StrCat("step ", step, ": ", plan.status().message()));
    Log(absl::StrCat("step ", step,
                     ": not plannable: ", plan.status().message()));
    return result;
  }
  if (plan->lower_bound_seconds <= 0) {
    absl::StatusOr<std::vector<int>> sizes =
        LegalSpSizes(*cost_model, options_.planner_options.sp_sizes);
    if (sizes.ok()) {
      absl::StatusOr<double> bound =
          StepTimeLowerBound(*cost_model, *sizes, lengths);
      if (bound.ok()) plan->lower_bound_seconds = *bound;
    }
  }
  const double latency_seconds = absl::ToDoubleSeconds(clock_.Now() - start);

  auto response = std::make_shared<v1::GetPlanResponse>();
  *response->mutable_plan() = PlanToProto(*plan, step);
  for (const v1::Sample& sample : batch.samples()) {
    response->add_sample_ids(sample.id());
  }
  response->set_params_version(params_version);
  response->set_using_default_params(params_version == 0);
  {
    v1::GetPlanResponse without_ids = *response;
    without_ids.clear_sample_ids();
    result->serialized_without_sample_ids =
        std::make_shared<const std::string>(without_ids.SerializeAsString());
  }
  result->serialized =
      std::make_shared<const std::string>(response->SerializeAsString());
  result->response = std::move(response);

  result->group_of_rank.assign(world_size_, -1);
  std::map<int, int> groups_by_size;
  int micro_batches = 0;
  int64_t checkpointed_layers_sum = 0;
  int max_checkpointed_layers = 0;
  for (size_t g = 0; g < plan->groups.size(); ++g) {
    const GroupPlan& group = plan->groups[g];
    GroupSummary summary;
    summary.predicted_seconds = group.predicted_seconds;
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      MicroBatchShape shape;
      shape.sp_size = group.sp_size();
      for (int index : micro_batch.sequence_indices) {
        shape.AddSequence(lengths[index]);
      }
      const MicroBatchCost cost =
          cost_model->MicroBatch(shape, micro_batch.checkpointed_layers);
      summary.micro_batch_compute_seconds.push_back(
          std::max(0.0, cost.total_seconds - cost.communication_seconds));
      checkpointed_layers_sum += micro_batch.checkpointed_layers;
      max_checkpointed_layers =
          std::max(max_checkpointed_layers, micro_batch.checkpointed_layers);
    }
    for (int rank : group.ranks) {
      if (rank >= 0 && rank < world_size_) {
        result->group_of_rank[rank] = static_cast<int>(g);
      }
    }
    result->groups.push_back(std::move(summary));
    ++groups_by_size[group.sp_size()];
    micro_batches += static_cast<int>(group.micro_batches.size());
  }

  metrics_->PlanComputed(latency_seconds, plan->predicted_step_seconds);
  metrics_->PlanShape(
      groups_by_size, micro_batches,
      micro_batches > 0
          ? static_cast<double>(checkpointed_layers_sum) / micro_batches
          : 0.0,
      max_checkpointed_layers);
  std::vector<std::string> sizes;  // largest SP size first
  for (auto it = groups_by_size.rbegin(); it != groups_by_size.rend(); ++it) {
    sizes.push_back(absl::StrCat(it->first, "x", it->second));
  }
  Log(absl::StrFormat(
      "step %d: SP sizes %s, %d micro-batches, predicted %s, lower bound %s "
      "(gap %.1f%%), planned in %.1f ms",
      step, absl::StrJoin(sizes, " "), micro_batches,
      FormatSeconds(plan->predicted_step_seconds),
      FormatSeconds(plan->lower_bound_seconds), 100 * plan->GapToLowerBound(),
      1e3 * latency_seconds));
  return result;
}

void PlannerHandlerImpl::FinishPlanning(int64_t step, const StepPlan& result) {
  auto it = steps_.find(step);
  if (it == steps_.end()) return;
  StepRecord& entry = it->second;
  if (result.retry) {
    entry.plan = StepPlanFuture();  // the next request tries again
    return;
  }
  entry.persisted = true;
  entry.batch = nullptr;
  pending_steps_.erase(step);
  cached_steps_.insert(step);
  // Evicts the oldest other steps beyond the cache size.
  while (static_cast<int>(cached_steps_.size()) > options_.plan_cache_steps) {
    auto oldest = cached_steps_.begin();
    if (*oldest == step) ++oldest;
    if (oldest == cached_steps_.end()) break;
    steps_[*oldest].plan = StepPlanFuture();
    stats_.erase(*oldest);
    cached_steps_.erase(oldest);
  }
}

absl::Status PlannerHandlerImpl::CheckCanServe(absl::string_view worker_id,
                                               int64_t step) {
  if (absl::Status status = Touch(worker_id, /*activity=*/true, step);
      !status.ok()) {
    return status;
  }
  if (!WorldComplete()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the world is incomplete (", WaitingFor(),
                     "); plans are served once every worker has registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const StepPlan>> PlannerHandlerImpl::AwaitPlan(
    const StepPlanFuture& future) {
  const std::shared_ptr<const StepPlan>& result = future.get();
  if (!result->status.ok()) return result->status;
  return result;
}

absl::StatusOr<std::shared_ptr<const StepPlan>>
PlannerHandlerImpl::PlanForRequest(const v1::GetPlanRequest& request) {
  if (!request.worker_id().empty()) {
    if (absl::Status status = ValidateIdentifier(
            "worker_id", request.worker_id(), "the pod name");
        !status.ok()) {
      return status;
    }
  }
  if (request.batch().samples().empty()) return PlanForStep(request);

  const v1::GlobalBatch& batch = request.batch();
  const int64_t step = batch.step();
  if (request.step() != 0 && request.step() != step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step = ", request.step(), " but batch.step = ", step,
        "; give the step once (batch.step with the samples, or step without "
        "them)"));
  }
  // Cheap (a few multiplies per sample); checked first so that a step that
  // is already planned is served without validating or copying its batch.
  const uint64_t fingerprint = BatchFingerprint(batch);
  if (request.batch_fingerprint() != 0 &&
      request.batch_fingerprint() != fingerprint) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_fingerprint = ", Hex(request.batch_fingerprint()),
        " but the samples sent have fingerprint ", Hex(fingerprint),
        "; compute it with BatchFingerprint over the same samples, or leave "
        "it 0"));
  }
  {
    absl::ReleasableMutexLock lock(&mu_);
    auto it = steps_.find(step);
    if (it != steps_.end() && it->second.fingerprint == fingerprint &&
        it->second.plan.valid()) {
      // The recorded batch with this fingerprint was validated when it
      // was first seen.
      if (absl::Status status = CheckCanServe(request.worker_id(), step);
          !status.ok()) {
        return status;
      }
      StepPlanFuture future = it->second.plan;
      lock.Release();
      return AwaitPlan(future);
    }
  }
  if (absl::Status status = ValidateGlobalBatch(batch, "batch"); !status.ok()) {
    return status;
  }
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status status = CheckCanServe(request.worker_id(), step);
        !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckFingerprint(step, fingerprint);
        !status.ok()) {
      return status;
    }
  }
  return PlanStep(std::make_shared<const v1::GlobalBatch>(batch), fingerprint);
}

absl::StatusOr<std::shared_ptr<const StepPlan>> PlannerHandlerImpl::PlanForStep(
    const v1::GetPlanRequest& request) {
  const int64_t step = request.step();
  if (request.has_batch() && request.batch().step() != step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch.samples is empty (step ", request.batch().step(),
        ") and step = ", step,
        "; give the step's sequences in batch, or leave batch unset and ask "
        "by step"));
  }
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step = ", step, "; steps are numbered from 0"));
  }
  std::shared_ptr<const v1::GlobalBatch> batch;
  uint64_t fingerprint = 0;
  {
    absl::ReleasableMutexLock lock(&mu_);
    if (absl::Status status = CheckCanServe(request.worker_id(), step);
        !status.ok()) {
      return status;
    }
    auto it = steps_.find(step);
    if (it == steps_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step,
          " is unknown: submit its batch (SubmitBatches or GetPlan with "
          "samples) first"));
    }
    const StepRecord& entry = it->second;
    if (request.batch_fingerprint() != 0 &&
        request.batch_fingerprint() != entry.fingerprint) {
      return absl::FailedPreconditionError(absl::StrCat(
          "batch_fingerprint = ", Hex(request.batch_fingerprint()),
          " but step ", step, " was recorded with batch fingerprint ",
          Hex(entry.fingerprint),
          "; this worker's batch differs from the one the planner has for "
          "the step (every rank must build the same batches: same dataset, "
          "seed and batch size)"));
    }
    if (entry.plan.valid()) {
      StepPlanFuture future = entry.plan;
      lock.Release();
      return AwaitPlan(future);
    }
    if (entry.batch == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step, "'s plan is no longer in memory (older than the last ",
          options_.plan_cache_steps,
          " planned steps, or planned before the planner restarted) and its "
          "batch is not kept; ask again with the batch's samples"));
    }
    batch = entry.batch;
    fingerprint = entry.fingerprint;
  }
  // Submitted ahead but not yet taken by a background thread (or none).
  return PlanStep(std::move(batch), fingerprint);
}

absl::StatusOr<v1::GetPlanResponse> PlannerHandlerImpl::GetPlan(
    const v1::GetPlanRequest& request) {
  absl::StatusOr<std::shared_ptr<const StepPlan>> plan =
      PlanForRequest(request);
  if (!plan.ok()) return plan.status();
  if (request.batch().samples_size() == 0 && request.batch_fingerprint() != 0) {
    v1::GetPlanResponse response = *(*plan)->response;
    response.clear_sample_ids();
    return response;
  }
  return *(*plan)->response;
}

absl::StatusOr<std::shared_ptr<const std::string>>
PlannerHandlerImpl::GetSerializedPlan(const v1::GetPlanRequest& request) {
  absl::StatusOr<std::shared_ptr<const StepPlan>> plan =
      PlanForRequest(request);
  if (!plan.ok()) return plan.status();
  if (request.batch().samples_size() == 0 && request.batch_fingerprint() != 0) {
    return (*plan)->serialized_without_sample_ids;
  }
  return (*plan)->serialized;
}

absl::StatusOr<v1::SubmitBatchesResponse> PlannerHandlerImpl::SubmitBatches(
    const v1::SubmitBatchesRequest& request) {
  std::vector<uint64_t> fingerprints;
  std::map<int64_t, int> index_of_step;
  for (int i = 0; i < request.batches_size(); ++i) {
    const v1::GlobalBatch& batch = request.batches(i);
    if (absl::Status status =
            ValidateGlobalBatch(batch, absl::StrCat("batches[", i, "]"));
        !status.ok()) {
      return status;
    }
    fingerprints.push_back(BatchFingerprint(batch));
    auto [it, inserted] = index_of_step.emplace(batch.step(), i);
    if (!inserted && fingerprints[it->second] != fingerprints[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batches[", i, "] and batches[", it->second, "] are both step ",
          batch.step(), " with different samples; a step has one batch"));
    }
  }
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < request.batches_size(); ++i) {
    if (absl::Status status =
            CheckFingerprint(request.batches(i).step(), fingerprints[i]);
        !status.ok()) {
      return status;
    }
  }
  int new_pending = 0;
  for (const auto& [step, i] : index_of_step) {
    auto it = steps_.find(step);
    if (it == steps_.end() ||
        (!it->second.plan.valid() && it->second.batch == nullptr)) {
      ++new_pending;
    }
  }
  if (pending_steps_.size() + new_pending > kMaxPendingBatches) {
    return absl::ResourceExhaustedError(absl::StrCat(
        pending_steps_.size(),
        " submitted batches are waiting to be planned "
        "and this request adds ",
        new_pending, "; at most ", kMaxPendingBatches,
        " may wait: submit a step's batch shortly before it runs (e.g. one "
        "step ahead), or fetch the waiting steps' plans first"));
  }
  const bool background =
      !stopping_ && options_.background_planning_threads > 0;
  for (const auto& [step, i] : index_of_step) {
    StepRecord& entry = steps_[step];
    entry.fingerprint = fingerprints[i];
    if (entry.plan.valid() || entry.batch != nullptr) continue;
    entry.batch = std::make_shared<const v1::GlobalBatch>(request.batches(i));
    pending_steps_.insert(step);
    if (background) queue_.push_back(step);
  }
  if (background) queue_cv_.SignalAll();
  v1::SubmitBatchesResponse response;
  response.set_accepted(request.batches_size());
  return response;
}

// ---------------------------------------------------------------------------
// Measurements, model and workers.

absl::StatusOr<v1::ReportStepStatsResponse> PlannerHandlerImpl::ReportStepStats(
    const v1::ReportStepStatsRequest& request) {
  if (absl::Status status =
          ValidateIdentifier("worker_id", request.worker_id(), "the pod name");
      !status.ok()) {
    return status;
  }
  if (request.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step = ", request.step(), "; steps are numbered from 0"));
  }
  if (request.rank() < 0 || request.rank() >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank = ", request.rank(), "; ranks are 0..",
                     world_size_ - 1, " in this world of ", world_size_));
  }
  if (!std::isfinite(request.step_seconds()) || request.step_seconds() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step_seconds = ", request.step_seconds(),
                     "; report the measured step time, a finite number > 0"));
  }
  std::set<int> seen_indices;
  for (int i = 0; i < request.micro_batches_size(); ++i) {
    const v1::MicroBatchStats& stats = request.micro_batches(i);
    const std::string field = absl::StrCat("micro_batches[", i, "]");
    if (stats.micro_batch_index() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".micro_batch_index = ", stats.micro_batch_index(),
          "; indices start at 0"));
    }
    if (!seen_indices.insert(stats.micro_batch_index()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".micro_batch_index = ", stats.micro_batch_index(),
          " repeats an earlier entry; report each micro-batch once"));
    }
    for (const auto& [name, value] :
         {std::pair<const char*, double>{"compute_seconds",
                                         stats.compute_seconds()},
          {"communication_seconds", stats.communication_seconds()},
          {"idle_seconds", stats.idle_seconds()}}) {
      if (absl::Status status =
              CheckFiniteNonNegative(absl::StrCat(field, ".", name), value);
          !status.ok()) {
        return status;
      }
    }
    if (stats.peak_memory_bytes() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".peak_memory_bytes = ", stats.peak_memory_bytes(),
          "; it must be >= 0"));
    }
  }

  const int64_t step = request.step();
  const int rank = request.rank();
  const double measured = request.step_seconds();
  std::optional<double> relative_error;
  std::optional<double> imbalance;
  double measured_over_predicted = 0;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status status =
            Touch(request.worker_id(), /*activity=*/true, step);
        !status.ok()) {
      return status;
    }
    const WorkerState& worker = workers_.at(request.worker_id());
    const int first = worker.first_rank;
    const int last = first + worker.registration.num_ranks() - 1;
    if (rank < first || rank > last) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank = ", rank, " is not one of worker ", Quote(request.worker_id()),
          "'s ranks ", first, "..", last));
    }
    auto entry = steps_.find(step);
    if (entry == steps_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step, " has not been planned; fetch its plan first"));
    }
    const StepPlanFuture& future = entry->second.plan;
    if (!future.valid() ||
        future.wait_for(std::chrono::seconds(0)) != std::future_status::ready ||
        !future.get()->status.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step,
          " has no plan in memory (not planned since the planner started, "
          "still planning, failed, or older than the last ",
          options_.plan_cache_steps,
          " steps); report steps right after running them"));
    }
    const StepPlan& plan = *future.get();
    const int group_index = plan.group_of_rank[rank];
    if (group_index < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, " has no group in step ", step, "'s plan"));
    }
    const GroupSummary& group = plan.groups[group_index];
    const int count =
        static_cast<int>(group.micro_batch_compute_seconds.size());
    for (int i = 0; i < request.micro_batches_size(); ++i) {
      const int index = request.micro_batches(i).micro_batch_index();
      if (index >= count) {
        return absl::InvalidArgumentError(absl::StrCat(
            "micro_batches[", i, "].micro_batch_index = ", index, " but rank ",
            rank, "'s group runs ", count, " micro-batches in step ", step,
            " (indices 0..", count - 1, ")"));
      }
    }

    RankReport report;
    report.step_seconds = measured;
    if (group.predicted_seconds > 0) {
      measured_over_predicted = measured / group.predicted_seconds;
      // A measurement so small that the error overflows says nothing.
      const double relative_error =
          std::abs(measured - group.predicted_seconds) / measured;
      if (std::isfinite(relative_error)) {
        report.relative_error = relative_error;
      }
    }
    // Online refit ratios, relative to the fitted parameters.
    const double correction =
        versions_.at(plan.params_version).compute_correction;
    if (plan.params_version >= refit_epoch_) {
      report.refit_epoch = refit_epoch_;
      for (const v1::MicroBatchStats& stats : request.micro_batches()) {
        const double predicted =
            group.micro_batch_compute_seconds[stats.micro_batch_index()] /
            correction;
        const double ratio = predicted / stats.compute_seconds();
        if (predicted > 0 && stats.compute_seconds() > 0 &&
            ratio >= 1 / kMaxRefitRatio && ratio <= kMaxRefitRatio) {
          report.compute_ratios.push_back(ratio);
        }
      }
    }

    StepStats& step_stats = stats_[step];
    if (auto previous = step_stats.ranks.find(rank);
        previous != step_stats.ranks.end()) {
      const RankReport& old = previous->second;
      if (old.relative_error.has_value()) {
        relative_error_sum_ -= *old.relative_error;
        --relative_error_count_;
      }
      if (old.refit_epoch == refit_epoch_) {
        for (double ratio : old.compute_ratios) {
          refit_ratio_sum_ -= ratio;
          refit_ratio_squared_sum_ -= ratio * ratio;
          --refit_count_;
        }
      }
    }
    if (report.relative_error.has_value()) {
      relative_error_sum_ += *report.relative_error;
      ++relative_error_count_;
    }
    if (report.refit_epoch == refit_epoch_) {
      for (double ratio : report.compute_ratios) {
        refit_ratio_sum_ += ratio;
        refit_ratio_squared_sum_ += ratio * ratio;
        ++refit_count_;
      }
    }
    relative_error = report.relative_error;
    step_stats.ranks[rank] = std::move(report);
    if (!step_stats.imbalance_reported &&
        static_cast<int>(step_stats.ranks.size()) == world_size_) {
      step_stats.imbalance_reported = true;
      double most = 0;
      double sum = 0;
      for (const auto& [r, rank_report] : step_stats.ranks) {
        most = std::max(most, rank_report.step_seconds);
        sum += rank_report.step_seconds;
      }
      imbalance = (most - sum / world_size_) / most;
      // Refit once per completed step, so that one step's reports make at
      // most one new version.
      MaybeRefit();
    }
  }
  metrics_->StepMeasured(rank, measured);
  if (relative_error.has_value()) metrics_->CostModelError(*relative_error);
  if (imbalance.has_value()) metrics_->StepImbalance(*imbalance);
  v1::ReportStepStatsResponse response;
  response.set_measured_over_predicted(measured_over_predicted);
  return response;
}

absl::StatusOr<v1::GetClusterModelResponse> PlannerHandlerImpl::GetClusterModel(
    const v1::GetClusterModelRequest&) {
  absl::MutexLock lock(&mu_);
  v1::GetClusterModelResponse response;
  *response.mutable_model() = ModelSpecToProto(options_.model);
  *response.mutable_cluster() = ClusterSpecToProto(options_.cluster);
  *response.mutable_params() =
      CostParamsToProto(versions_.rbegin()->second.cost_model->params());
  for (const ModelFitReport& report : reports_) {
    *response.add_reports() = FitReportToProto(report);
  }
  response.set_params_version(CurrentVersion());
  response.set_using_default_params(CurrentVersion() == 0);
  response.set_step_relative_error(
      relative_error_count_ > 0 ? relative_error_sum_ / relative_error_count_
                                : 0);
  return response;
}

absl::StatusOr<v1::ListWorkersResponse> PlannerHandlerImpl::ListWorkers(
    const v1::ListWorkersRequest&) {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  std::vector<const WorkerState*> ordered;
  for (const auto& [id, worker] : workers_) ordered.push_back(&worker);
  std::sort(ordered.begin(), ordered.end(),
            [](const WorkerState* a, const WorkerState* b) {
              return a->first_rank < b->first_rank;
            });
  v1::ListWorkersResponse response;
  for (const WorkerState* worker : ordered) {
    const v1::RegisterWorkerRequest& registration = worker->registration;
    v1::WorkerInfo* info = response.add_workers();
    info->set_worker_id(registration.worker_id());
    info->set_node_name(registration.node_name());
    info->set_node_index(worker->node_index);
    info->set_first_rank(worker->first_rank);
    info->set_num_ranks(registration.num_ranks());
    info->set_address(registration.address());
    info->set_gpu_kind(registration.gpu_kind());
    info->set_libtorch_version(registration.libtorch_version());
    info->set_backend(registration.backend());
    if (now - worker->last_seen > options_.worker_liveness_timeout) {
      info->set_state(v1::WorkerInfo::LOST);
    } else if (worker->active) {
      info->set_state(v1::WorkerInfo::ACTIVE);
    } else {
      info->set_state(v1::WorkerInfo::REGISTERED);
    }
    info->set_last_seen_unix_millis(absl::ToUnixMillis(worker->last_seen));
    info->set_last_step(worker->last_step);
  }
  response.set_world_size(world_size_);
  response.set_world_complete(WorldComplete());
  return response;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PlannerHandler>> PlannerHandler::Create(
    PlannerHandlerOptions options, const Clock& clock, PlannerMetrics* metrics,
    std::function<void(const std::string&)> log) {
  absl::StatusOr<CostModel> default_model =
      CostModel::CreateDefault(options.model, options.cluster);
  if (!default_model.ok()) return default_model.status();
  if (absl::StatusOr<std::vector<int>> sizes =
          LegalSpSizes(*default_model, options.planner_options.sp_sizes);
      !sizes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("planner_options.sp_sizes: ", sizes.status().message()));
  }
  if (options.plan_cache_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan_cache_steps = ", options.plan_cache_steps,
                     "; keep at least 1 plan"));
  }
  if (options.background_planning_threads < 0 ||
      options.background_planning_threads > kMaxBackgroundPlanningThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "background_planning_threads = ", options.background_planning_threads,
        "; use 0 (plan on demand) to ", kMaxBackgroundPlanningThreads));
  }
  if (options.worker_liveness_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_liveness_timeout = ",
                     absl::FormatDuration(options.worker_liveness_timeout),
                     "; it must be positive"));
  }
  std::unique_ptr<StateStore> store;
  if (!options.state_dir.empty()) {
    absl::StatusOr<std::unique_ptr<StateStore>> opened =
        StateStore::Open(options.state_dir);
    if (!opened.ok()) return opened.status();
    store = *std::move(opened);
  }
  auto handler = std::make_unique<PlannerHandlerImpl>(
      std::move(options), clock, metrics, std::move(log), std::move(store),
      std::make_shared<const CostModel>(*std::move(default_model)));
  if (absl::Status status = handler->Load(); !status.ok()) return status;
  handler->StartThreads();
  return handler;
}

}  // namespace dcp
