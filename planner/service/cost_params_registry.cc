#include "planner/service/cost_params_registry.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/client/proto_convert.h"

namespace dcp {
namespace {

std::string SerializeParams(const CostParams& params) {
  return CostParamsToProto(params).SerializeAsString();
}

// What the workers' registrations decide of the memory model (no profile
// measures it): the communicators they hold and their training state.
void CopyDeclaredByWorkers(const MemoryParams& from, MemoryParams& to) {
  to.communicator_bytes = from.communicator_bytes;
  to.communicators_per_rank = from.communicators_per_rank;
  to.weight_bytes_per_parameter = from.weight_bytes_per_parameter;
  to.gradient_bytes_per_parameter = from.gradient_bytes_per_parameter;
  to.optimizer_bytes_per_parameter = from.optimizer_bytes_per_parameter;
  to.zero1_optimizer_sharding = from.zero1_optimizer_sharding;
  to.zero3_parameter_sharding = from.zero3_parameter_sharding;
}

bool SameDeclaredByWorkers(const MemoryParams& a, const MemoryParams& b) {
  return a.communicator_bytes == b.communicator_bytes &&
         a.communicators_per_rank == b.communicators_per_rank &&
         a.weight_bytes_per_parameter == b.weight_bytes_per_parameter &&
         a.gradient_bytes_per_parameter == b.gradient_bytes_per_parameter &&
         a.optimizer_bytes_per_parameter == b.optimizer_bytes_per_parameter &&
         a.zero1_optimizer_sharding == b.zero1_optimizer_sharding &&
         a.zero3_parameter_sharding == b.zero3_parameter_sharding;
}

}  // namespace

CostParamsRegistry::CostParamsRegistry(
    ModelSpec model, ClusterSpec cluster,
    std::shared_ptr<const CostModel> default_model, PlannerStateStore* store)
    : model_(std::move(model)),
      cluster_(std::move(cluster)),
      default_params_(default_model->params()),
      store_(store) {
  auto defaults = std::make_shared<const ParamsVersion>(
      ParamsVersion{0, std::move(default_model), 1, /*defaults=*/true});
  versions_[0] = defaults;
  auto snapshot = std::make_shared<CostParamsSnapshot>();
  snapshot->current = std::move(defaults);
  snapshot->fitted_params = default_params_;
  snapshot_ = std::move(snapshot);
}

absl::Status CostParamsRegistry::Load(
    const std::map<int64_t, v1::ParamsVersionRecord>& versions) {
  absl::MutexLock lock(&mu_);
  auto snapshot = std::make_shared<CostParamsSnapshot>(*snapshot_);
  for (const auto& [number, record] : versions) {
    absl::StatusOr<CostModel> cost_model = CostModel::Create(
        model_, cluster_, CostParamsFromProto(record.params()));
    if (!cost_model.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "state record of parameter version ", number, ": ",
          cost_model.status().message(),
          "; restore the state directory or start with an empty one"));
    }
    auto version = std::make_shared<const ParamsVersion>(ParamsVersion{
        number, std::make_shared<const CostModel>(*std::move(cost_model)),
        record.compute_correction(), record.defaults(),
        record.communication_correction() > 0
            ? record.communication_correction()
            : 1.0,
        record.micro_batch_refit()});
    versions_[number] = version;
    // The last (highest) version sets the current fit.
    snapshot->current = std::move(version);
    snapshot->fitted_params = CostParamsFromProto(record.fitted_params());
    snapshot->reports.clear();
    for (const v1::FitReport& report : record.reports()) {
      snapshot->reports.push_back(FitReportFromProto(report));
    }
    snapshot->refit_epoch = record.refit_epoch();
  }
  snapshot_ = std::move(snapshot);
  return absl::OkStatus();
}

std::shared_ptr<const CostParamsSnapshot> CostParamsRegistry::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return snapshot_;
}

std::shared_ptr<const ParamsVersion> CostParamsRegistry::Version(
    int64_t version) const {
  absl::MutexLock lock(&mu_);
  auto it = versions_.find(version);
  return it == versions_.end() ? nullptr : it->second;
}

absl::StatusOr<int64_t> CostParamsRegistry::AddVersion(
    const CostParams& params, double compute_correction,
    double communication_correction, CostParamsSnapshot next, bool defaults,
    bool micro_batch_refit) {
  absl::StatusOr<CostModel> cost_model =
      CostModel::Create(model_, cluster_, params);
  if (!cost_model.ok()) return cost_model.status();
  const int64_t version = next.current->version + 1;
  if (store_ != nullptr) {
    v1::ParamsVersionRecord record;
    record.set_params_version(version);
    record.set_compute_correction(compute_correction);
    record.set_defaults(defaults);
    record.set_communication_correction(communication_correction);
    record.set_micro_batch_refit(micro_batch_refit);
    record.set_refit_epoch(next.refit_epoch);
    *record.mutable_params() = CostParamsToProto(params);
    *record.mutable_fitted_params() = CostParamsToProto(next.fitted_params);
    for (const ModelFitReport& report : next.reports) {
      *record.add_reports() = FitReportToProto(report);
    }
    if (absl::Status status = store_->WriteParamsVersion(record);
        !status.ok()) {
      return PersistError(absl::StrCat("parameter version ", version), status);
    }
  }
  auto made = std::make_shared<const ParamsVersion>(ParamsVersion{
      version, std::make_shared<const CostModel>(*std::move(cost_model)),
      compute_correction, defaults, communication_correction,
      micro_batch_refit});
  next.current = made;
  absl::MutexLock lock(&mu_);
  versions_[version] = std::move(made);
  snapshot_ = std::make_shared<const CostParamsSnapshot>(std::move(next));
  return version;
}

absl::Status CostParamsRegistry::ApplyFit(const CostModelFit& fitted) {
  absl::MutexLock write_lock(&write_mu_);
  // Only writers (serialized here) replace the snapshot.
  std::shared_ptr<const CostParamsSnapshot> previous = Snapshot();
  // A profile does not measure the communicators or the training state:
  // keep the workers'.
  CostModelFit fit = fitted;
  CopyDeclaredByWorkers(previous->fitted_params.memory, fit.params.memory);
  CostParamsSnapshot next = *previous;
  next.reports = fit.reports;
  next.fitted_params = fit.params;
  // Against the previous fit: an unchanged fit keeps any online correction.
  if (SerializeParams(fit.params) == SerializeParams(previous->fitted_params)) {
    absl::MutexLock lock(&mu_);
    snapshot_ = std::make_shared<const CostParamsSnapshot>(std::move(next));
    return absl::OkStatus();
  }
  // A new fit is a new baseline: online corrections start over from it.
  next.refit_epoch = previous->current->version + 1;
  return AddVersion(fit.params, /*compute_correction=*/1,
                    /*communication_correction=*/1, std::move(next))
      .status();
}

absl::StatusOr<std::optional<int64_t>> CostParamsRegistry::SetCommunicators(
    double communicator_bytes, int communicators_per_rank) {
  return SetDeclared([&](MemoryParams& memory) {
    memory.communicator_bytes = communicator_bytes;
    memory.communicators_per_rank = communicators_per_rank;
  });
}

absl::StatusOr<std::optional<int64_t>> CostParamsRegistry::SetTrainingState(
    TrainingPrecision precision, ParameterSharding sharding) {
  return SetDeclared([&](MemoryParams& memory) {
    SetTrainingStateBytes(precision, sharding, memory);
  });
}

absl::StatusOr<std::optional<int64_t>> CostParamsRegistry::SetDeclared(
    const std::function<void(MemoryParams&)>& declare) {
  absl::MutexLock write_lock(&write_mu_);
  std::shared_ptr<const CostParamsSnapshot> previous = Snapshot();
  CostParams params = previous->current->cost_model->params();
  declare(params.memory);
  CostParamsSnapshot next = *previous;
  declare(next.fitted_params.memory);
  if (SameDeclaredByWorkers(params.memory,
                            previous->current->cost_model->params().memory) &&
      SameDeclaredByWorkers(next.fitted_params.memory,
                            previous->fitted_params.memory)) {
    return std::nullopt;
  }
  absl::StatusOr<int64_t> version = AddVersion(
      params, previous->current->compute_correction,
      previous->current->communication_correction, std::move(next),
      previous->current->defaults, previous->current->micro_batch_refit);
  if (!version.ok()) return version.status();
  return *version;
}

absl::StatusOr<std::optional<int64_t>> CostParamsRegistry::ApplyRefit(
    int64_t epoch, double factor, double change_threshold,
    std::optional<double> communication_factor,
    std::optional<std::pair<double, double>> all_to_all_intra,
    std::optional<std::pair<double, double>> all_to_all_inter,
    std::optional<MicroBatchRefit::Coefficients> micro_batch_fit,
    std::optional<double> sp_compute_scale) {
  if (sp_compute_scale.has_value() &&
      (!(*sp_compute_scale > 0) || !std::isfinite(*sp_compute_scale))) {
    return absl::InvalidArgumentError(
        absl::StrCat("SP compute scale is ", *sp_compute_scale,
                     "; it must be positive and finite"));
  }
  absl::MutexLock write_lock(&write_mu_);
  std::shared_ptr<const CostParamsSnapshot> previous = Snapshot();
  const double current = previous->current->compute_correction;
  const double current_communication =
      previous->current->communication_correction;
  const double communication =
      communication_factor.value_or(current_communication);
  if (previous->refit_epoch != epoch) return std::nullopt;
  auto moved = [&](double from, double to) {
    return from > 0 ? std::abs(to / from - 1) > change_threshold : to > 0;
  };
  bool compute_moved = std::abs(factor / current - 1) > change_threshold;
  CostParams next;
  if (micro_batch_fit.has_value()) {
    const auto [scale, per_micro_batch, per_layer, per_sequence_layer] =
        *micro_batch_fit;
    if (!(scale > 0) || !std::isfinite(scale)) {
      return absl::InvalidArgumentError(
          absl::StrCat("micro-batch refit rate scale is ", scale,
                       "; it must be positive and finite"));
    }
    factor = scale;
    next = ScaleComputeTime(previous->fitted_params, scale);
    ComputeParams& compute = next.compute;
    compute.micro_batch_fixed_seconds = std::max(0.0, per_micro_batch);
    compute.layer_fixed_seconds = std::max(0.0, per_layer);
    compute.sequence_layer_fixed_seconds = std::max(0.0, per_sequence_layer);
    const ComputeParams& now_compute =
        previous->current->cost_model->params().compute;
    compute_moved =
        std::abs(scale / current - 1) > change_threshold ||
        moved(now_compute.micro_batch_fixed_seconds,
              compute.micro_batch_fixed_seconds) ||
        moved(now_compute.layer_fixed_seconds, compute.layer_fixed_seconds) ||
        moved(now_compute.sequence_layer_fixed_seconds,
              compute.sequence_layer_fixed_seconds);
  } else {
    next = ScaleComputeTime(previous->fitted_params, factor);
  }
  next.compute.sp_compute_scale =
      previous->fitted_params.compute.sp_compute_scale *
      sp_compute_scale.value_or(1.0);
  compute_moved |=
      std::abs(
          next.compute.sp_compute_scale /
              previous->current->cost_model->params().compute.sp_compute_scale -
          1) > change_threshold;
  next = ScaleCommunicationTime(std::move(next), communication);
  const CommParams& now = previous->current->cost_model->params().comm;
  bool all_to_all_moved = false;
  // Sets one kind's (latency, bandwidth) fit; notes whether it moved.
  auto set_fit = [&](const std::optional<std::pair<double, double>>& fit,
                     double now_latency, double now_bandwidth, double& latency,
                     double& bandwidth) {
    if (!fit.has_value()) return;
    latency = fit->first;
    bandwidth = fit->second;
    all_to_all_moved |=
        moved(now_latency, fit->first) || moved(now_bandwidth, fit->second);
  };
  set_fit(all_to_all_intra, now.all_to_all_intra_latency_seconds,
          now.all_to_all_intra_bus_bytes_per_second,
          next.comm.all_to_all_intra_latency_seconds,
          next.comm.all_to_all_intra_bus_bytes_per_second);
  set_fit(all_to_all_inter, now.all_to_all_inter_latency_seconds,
          now.all_to_all_inter_bus_bytes_per_second,
          next.comm.all_to_all_inter_latency_seconds,
          next.comm.all_to_all_inter_bus_bytes_per_second);
  if (!compute_moved &&
      std::abs(communication / current_communication - 1) <= change_threshold &&
      !all_to_all_moved) {
    return std::nullopt;
  }
  absl::StatusOr<int64_t> version =
      AddVersion(next, factor, communication, *previous, /*defaults=*/false,
                 micro_batch_fit.has_value());
  if (!version.ok()) return version.status();
  return *version;
}

}  // namespace dcp
