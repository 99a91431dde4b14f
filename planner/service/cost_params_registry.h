#ifndef DCP_PLANNER_SERVICE_COST_PARAMS_REGISTRY_H_
#define DCP_PLANNER_SERVICE_COST_PARAMS_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "cost_model/memory_model.h"
#include "cost_model/micro_batch_refit.h"
#include "cost_model/model_spec.h"
#include "cost_model/online_refit.h"
#include "dcp/v1/planner_state.pb.h"
#include "planner/service/planner_state_store.h"

namespace dcp {

/// One cost-parameter version. Immutable.
struct ParamsVersion {
  int64_t version = 0;
  std::shared_ptr<const CostModel> cost_model;
  /// Factor the online refit applied to the fitted compute time.
  double compute_correction = 1;
  /// The defaults (version 0, or they with only the workers'
  /// communicators): no profile fit, no online correction.
  bool defaults = false;
  /// Factor the online refit applied to the fitted all-to-all time.
  double communication_correction = 1;
  /// The online refit fitted the micro-batch model: compute_correction is
  /// its rate scale and the fixed compute terms are fitted, not scaled.
  bool micro_batch_refit = false;
};

/// The registry's state at one moment. Immutable: callers keep it as long
/// as they like without holding any lock.
struct CostParamsSnapshot {
  /// The current (highest) version.
  std::shared_ptr<const ParamsVersion> current;
  /// The latest profile fit (the defaults before any), which online
  /// corrections scale, and its per-kind reports.
  CostParams fitted_params;
  std::vector<ModelFitReport> reports;
  /// The version of the latest profile fit: online refit counts only steps
  /// planned with versions >= this.
  int64_t refit_epoch = 0;
};

/// Every cost-parameter version of the job (0 = the defaults) and the
/// current fit, handed out as immutable snapshots.
///
/// Thread model: `mu_` guards the versions and the current snapshot and is
/// held only to read or swap them. `write_mu_` (taken first) serializes
/// new versions, whose record is written to the state store without `mu_`:
/// readers (every GetPlan) never wait for the disk. Calls no other manager.
class CostParamsRegistry {
 public:
  /// `store` may be null (memory only); it must outlive the registry.
  CostParamsRegistry(ModelSpec model, ClusterSpec cluster,
                     std::shared_ptr<const CostModel> default_model,
                     PlannerStateStore* store);

  /// Installs a state directory's versions (before any other call).
  absl::Status Load(const std::map<int64_t, v1::ParamsVersionRecord>& versions);

  std::shared_ptr<const CostParamsSnapshot> Snapshot() const
      ABSL_LOCKS_EXCLUDED(mu_);
  /// Version `version`, or null if there is none.
  std::shared_ptr<const ParamsVersion> Version(int64_t version) const
      ABSL_LOCKS_EXCLUDED(mu_);
  const CostParams& default_params() const { return default_params_; }

  /// Makes a profile fit current. When its parameters differ from the
  /// previous fit's, that is a new version (and a new refit epoch);
  /// otherwise only the reports change (keeping any online correction).
  absl::Status ApplyFit(const CostModelFit& fit)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);

  /// The communicators the job's workers hold (MemoryParams's
  /// communicator_bytes and communicators_per_rank, from their
  /// registrations): a new version with them, keeping the current
  /// parameters and correction otherwise, unless they are already counted.
  /// Later fits keep them. Returns the new version, or nullopt.
  absl::StatusOr<std::optional<int64_t>> SetCommunicators(
      double communicator_bytes, int communicators_per_rank)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);

  /// The training state the job's workers declared (their precision and
  /// optimizer sharding; SetTrainingStateBytes): a new version counting its
  /// bytes per parameter, as SetCommunicators. Later fits keep it.
  absl::StatusOr<std::optional<int64_t>> SetTrainingState(
      TrainingPrecision precision, ParameterSharding sharding)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);

  /// Online refit: a new version whose compute time is the fit's scaled by
  /// `factor`, unless the refit epoch is no longer `epoch` or `factor` is
  /// within `change_threshold` (relative) of the current correction.
  /// Returns the new version, or nullopt if none was made.
  /// `communication_factor`, when given, likewise scales the all-to-all
  /// time (else the current communication correction is kept); a version
  /// is made when either moves beyond the threshold.
  /// `all_to_all_intra` / `all_to_all_inter`, when given, are {latency
  /// seconds, bus bytes per second} fitted to measured all-to-alls: they
  /// replace that kind's parameters (the factor then scales only the
  /// other kind), and a version is made when one moves beyond the threshold.
  /// `micro_batch_fit`, when given, is {rate scale s, per micro-batch, per
  /// layer pass, per sequence and layer pass seconds} fitted to measured
  /// micro-batches (cost_model/micro_batch_refit.h): the fit's compute
  /// rates are divided by s and the three fixed terms set (`factor` is then
  /// unused; the version's compute_correction is s); a version is made
  /// when s or a fixed term moves beyond the threshold.
  /// `sp_compute_scale`, when given, multiplies the fit's
  /// ComputeParams::sp_compute_scale (what the micro-batches at SP >= 2 take
  /// beyond the factor); a version is made when that moves beyond the
  /// threshold. Without it the fit's is kept.
  absl::StatusOr<std::optional<int64_t>> ApplyRefit(
      int64_t epoch, double factor, double change_threshold,
      std::optional<double> communication_factor = std::nullopt,
      std::optional<std::pair<double, double>> all_to_all_intra = std::nullopt,
      std::optional<std::pair<double, double>> all_to_all_inter = std::nullopt,
      std::optional<MicroBatchRefit::Coefficients> micro_batch_fit =
          std::nullopt,
      std::optional<double> sp_compute_scale = std::nullopt)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);

 private:
  /// SetCommunicators and SetTrainingState: `declare` applied to the
  /// current and the fitted memory parameters, a new version if it changes
  /// what the workers declare.
  absl::StatusOr<std::optional<int64_t>> SetDeclared(
      const std::function<void(MemoryParams&)>& declare)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);
  /// Writes and installs a version made from `snapshot`'s fit.
  /// `defaults`: ParamsVersion::defaults of the new version.
  absl::StatusOr<int64_t> AddVersion(const CostParams& params,
                                     double compute_correction,
                                     double communication_correction,
                                     CostParamsSnapshot next,
                                     bool defaults = false,
                                     bool micro_batch_refit = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) ABSL_LOCKS_EXCLUDED(mu_);

  const ModelSpec model_;
  const ClusterSpec cluster_;
  const CostParams default_params_;
  PlannerStateStore* const store_;

  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::map<int64_t, std::shared_ptr<const ParamsVersion>> versions_
      ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const CostParamsSnapshot> snapshot_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_COST_PARAMS_REGISTRY_H_
