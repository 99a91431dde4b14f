#ifndef DCP_PLANNER_SERVICE_PROFILE_FITTER_H_
#define DCP_PLANNER_SERVICE_PROFILE_FITTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/model_spec.h"
#include "dcp/v1/planner_service.pb.h"
#include "planner/service/cost_params_registry.h"
#include "planner/service/planner_metrics.h"
#include "planner/service/planner_state_store.h"

namespace dcp {

/// The workers' profiles (one slot per worker, in order of first
/// submission) and the cost-model fits over all of them, which it hands to
/// the CostParamsRegistry.
///
/// A profile is recorded first; then one fit at a time runs over every
/// profile recorded so far, and a fit that covers a profile answers it: when
/// many workers submit at once (every rank at startup), the fit that runs
/// next covers all of theirs and they need not fit again, so the number of
/// fits grows with how long fits take, not with the number of workers.
///
/// Thread model: `mu_` guards the slots and generations and is held only
/// for in-memory work. `record_mu_` serializes recording a profile (its
/// state-store write runs under it, not under `mu_`); `fit_mu_` serializes
/// fits, and is the one lock held across a call into another manager
/// (CostParamsRegistry::ApplyFit, which calls nothing back).
class ProfileFitter {
 public:
  /// `registry`, `store` (may be null), `metrics` and `log` must outlive
  /// the fitter.
  ProfileFitter(ModelSpec model, ClusterSpec cluster,
                CostParamsRegistry& registry, PlannerStateStore* store,
                PlannerMetrics& metrics,
                std::function<void(const std::string&)> log);

  /// Installs a state directory's profiles (before any other call); the
  /// loaded parameters fit them.
  void Load(std::vector<v1::SubmitProfileRequest> profiles);

  /// Checks `request`'s samples on their own, so that errors name the
  /// index in this request.
  absl::Status CheckSamples(const v1::SubmitProfileRequest& request) const;

  /// Records `request` (replacing the worker's earlier profile) and returns
  /// once a fit covering it is current. The request must have passed
  /// ValidateSubmitProfileRequest and CheckSamples and come from a
  /// registered worker.
  absl::Status Submit(const v1::SubmitProfileRequest& request)
      ABSL_LOCKS_EXCLUDED(record_mu_, fit_mu_, mu_);

 private:
  using Profile = std::shared_ptr<const v1::SubmitProfileRequest>;

  /// Records `request`; returns the generation that includes it.
  absl::StatusOr<int64_t> Record(const v1::SubmitProfileRequest& request)
      ABSL_LOCKS_EXCLUDED(record_mu_, mu_);

  void Log(const std::string& line) const {
    if (log_) log_(line);
  }

  const ModelSpec model_;
  const ClusterSpec cluster_;
  CostParamsRegistry& registry_;
  PlannerStateStore* const store_;
  PlannerMetrics& metrics_;
  const std::function<void(const std::string&)> log_;

  absl::Mutex fit_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex record_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  /// By slot; shared so that a fit takes a snapshot cheaply.
  std::vector<Profile> profiles_ ABSL_GUARDED_BY(mu_);
  /// Counts changes to `profiles_`; `fitted_generation_` is the generation
  /// the current fit covers (both 0 after loading: the loaded parameters
  /// fit the loaded profiles).
  int64_t profiles_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fitted_generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PROFILE_FITTER_H_
