#include "planner/service/profile_fitter.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "cost_model/fitting.h"
#include "planner/client/proto_convert.h"

namespace dcp {

ProfileFitter::ProfileFitter(ModelSpec model, ClusterSpec cluster,
                             CostParamsRegistry& registry,
                             PlannerStateStore* store, PlannerMetrics& metrics,
                             std::function<void(const std::string&)> log)
    : model_(std::move(model)),
      cluster_(std::move(cluster)),
      registry_(registry),
      store_(store),
      metrics_(metrics),
      log_(std::move(log)) {}

void ProfileFitter::Load(std::vector<v1::SubmitProfileRequest> profiles) {
  absl::MutexLock lock(&mu_);
  for (v1::SubmitProfileRequest& profile : profiles) {
    profiles_.push_back(
        std::make_shared<const v1::SubmitProfileRequest>(std::move(profile)));
  }
}

absl::StatusOr<int64_t> ProfileFitter::Record(
    const v1::SubmitProfileRequest& request) {
  absl::MutexLock record_lock(&record_mu_);
  int slot = 0;
  const std::string bytes = request.SerializeAsString();
  {
    absl::MutexLock lock(&mu_);
    slot = static_cast<int>(profiles_.size());
    for (size_t i = 0; i < profiles_.size(); ++i) {
      if (profiles_[i]->worker_id() == request.worker_id()) {
        slot = static_cast<int>(i);
      }
    }
    if (slot < static_cast<int>(profiles_.size()) &&
        profiles_[slot]->SerializeAsString() == bytes) {
      return profiles_generation_;  // unchanged
    }
  }
  // Only recorders (serialized here) add or replace slots.
  if (store_ != nullptr) {
    if (absl::Status status = store_->WriteProfile(slot, request);
        !status.ok()) {
      return PersistError("the profile", status);
    }
  }
  auto stored = std::make_shared<const v1::SubmitProfileRequest>(request);
  absl::MutexLock lock(&mu_);
  if (slot == static_cast<int>(profiles_.size())) {
    profiles_.push_back(std::move(stored));
  } else {
    profiles_[slot] = std::move(stored);
  }
  return ++profiles_generation_;
}

absl::Status ProfileFitter::CheckSamples(
    const v1::SubmitProfileRequest& request) const {
  absl::StatusOr<std::vector<ProfileSample>> own_samples =
      ProfileSamplesFromProto(request.samples());
  if (!own_samples.ok()) return own_samples.status();
  return FitCostModel(model_, cluster_, registry_.default_params(),
                      *own_samples)
      .status();
}

absl::Status ProfileFitter::Submit(const v1::SubmitProfileRequest& request) {
  // Record the profile before any fit.
  absl::StatusOr<int64_t> generation = Record(request);
  if (!generation.ok()) return generation.status();

  absl::MutexLock fit_lock(&fit_mu_);
  std::vector<Profile> profiles;
  int64_t snapshot_generation = 0;
  {
    absl::MutexLock lock(&mu_);
    if (fitted_generation_ >= *generation) return absl::OkStatus();
    profiles = profiles_;
    snapshot_generation = profiles_generation_;
  }
  std::vector<ProfileSample> samples;
  for (const Profile& profile : profiles) {
    absl::StatusOr<std::vector<ProfileSample>> converted =
        ProfileSamplesFromProto(profile->samples());
    if (!converted.ok()) return converted.status();  // validated when stored
    samples.insert(samples.end(), converted->begin(), converted->end());
  }
  absl::StatusOr<CostModelFit> fit =
      FitCostModel(model_, cluster_, registry_.default_params(), samples);
  if (!fit.ok()) return fit.status();
  DCP_RETURN_IF_ERROR(registry_.ApplyFit(*fit));
  {
    absl::MutexLock lock(&mu_);
    fitted_generation_ = snapshot_generation;
  }
  std::vector<std::string> summary;
  for (const ModelFitReport& report : fit->reports) {
    summary.push_back(report.used_defaults
                          ? absl::StrCat(report.name, " defaults")
                          : absl::StrFormat("%s rms %.1f%%", report.name,
                                            100 * report.rms_relative_error));
  }
  metrics_.ProfilesFitted(static_cast<int>(profiles.size()),
                          static_cast<int64_t>(samples.size()));
  Log(absl::StrCat("profiles fitted: ", samples.size(), " samples from ",
                   profiles.size(), " workers (after worker ",
                   request.worker_id(), "'s ", request.samples_size(),
                   "); params v", registry_.Snapshot()->current->version, "; ",
                   absl::StrJoin(summary, ", ")));
  return absl::OkStatus();
}

}  // namespace dcp
