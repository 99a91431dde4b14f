#include "cost_model/sp_micro_batch_fit.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cost_model/micro_batch_shape.h"
#include "cost_model/online_refit.h"

namespace dcp {
namespace {

double Passes(const ModelSpec& model, const ProfileSample& sample) {
  return 2.0 * model.num_layers + sample.checkpointed_layers;
}

constexpr size_t kNeeded = 2;

// What the samples (all but `skipped`) say, each correction present when
// enough samples inform it.
struct Corrections {
  std::optional<AllToAllRefitAccumulator::Fit> intra;
  std::optional<AllToAllRefitAccumulator::Fit> inter;
  std::optional<double> ulysses_layer_fixed;
};

// The in-situ all-to-all of one kind of group: latency and bandwidth when
// the rows tell them apart, else the latency alone at `profiled_bandwidth`.
std::optional<AllToAllRefitAccumulator::Fit> InSitu(
    const AllToAllRefitAccumulator& rows, double profiled_bandwidth) {
  if (rows.count() < static_cast<int64_t>(kNeeded)) return std::nullopt;
  if (std::optional<AllToAllRefitAccumulator::Fit> fit = rows.Solve();
      fit.has_value()) {
    return fit;
  }
  return rows.SolveLatency(profiled_bandwidth);
}

// Fits the corrections over `base` (whose all-to-all bandwidths and compute
// terms stay). The latency first: the compute part does not depend on it.
absl::StatusOr<Corrections> Solve(const ModelSpec& model,
                                  const ClusterSpec& cluster,
                                  const CostParams& base,
                                  const std::vector<ProfileSample>& samples,
                                  int skipped) {
  CostParams no_fixed = base;
  no_fixed.compute.ulysses_layer_fixed_seconds = 0;
  absl::StatusOr<CostModel> cost = CostModel::Create(model, cluster, no_fixed);
  if (!cost.ok()) return cost.status();
  // Least squares: communication = latency * calls + bus bytes / bandwidth
  // per kind of group (unweighted, InSitu), and u * passes =
  // outside - predicted. Each sample weighs by 1 / measured^2, so the small
  // micro-batches, whose time is mostly the fixed costs, inform u most.
  struct Sums {
    double numerator = 0;
    double denominator = 0;
    size_t count = 0;
    void Add(double x, double residual, double measured) {
      numerator += x * residual / (measured * measured);
      denominator += x * x / (measured * measured);
      ++count;
    }
    std::optional<double> Solution() const {
      if (count < kNeeded || !(denominator > 0)) return std::nullopt;
      return std::max(0.0, numerator / denominator);
    }
  };
  AllToAllRefitAccumulator intra, inter;
  Sums outside_fixed;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (static_cast<int>(i) == skipped) continue;
    const ProfileSample& s = samples[i];
    const MicroBatchShape shape = ShapeOfMicroBatchSample(s);
    const double passes = Passes(model, s);
    if (s.communication_seconds > 0) {
      (s.inter_node ? inter : intra)
          .Add(AllToAllCalls(model, shape, s.checkpointed_layers),
               AllToAllBusBytes(model, shape, s.checkpointed_layers),
               s.communication_seconds);
    }
    const MicroBatchCost predicted =
        cost->MicroBatch(shape, s.checkpointed_layers);
    const double outside = s.measured_seconds - s.communication_seconds;
    if (outside > 0) {
      outside_fixed.Add(
          passes,
          outside - (predicted.total_seconds - predicted.communication_seconds),
          outside);
    }
  }
  return Corrections{
      InSitu(intra, base.comm.all_to_all_intra_bus_bytes_per_second),
      InSitu(inter, base.comm.all_to_all_inter_bus_bytes_per_second),
      outside_fixed.Solution()};
}

void Apply(const Corrections& corrections, CostParams& params) {
  if (corrections.intra.has_value()) {
    SetAllToAll(*corrections.intra, /*inter_node=*/false, params.comm);
  }
  if (corrections.inter.has_value()) {
    SetAllToAll(*corrections.inter, /*inter_node=*/true, params.comm);
  }
  if (corrections.ulysses_layer_fixed.has_value()) {
    params.compute.ulysses_layer_fixed_seconds =
        *corrections.ulysses_layer_fixed;
  }
}

// Relative error of the whole micro-batch `sample` under `cost`.
double RelativeError(const CostModel& cost, const ProfileSample& sample) {
  const double predicted = cost.MicroBatch(ShapeOfMicroBatchSample(sample),
                                           sample.checkpointed_layers)
                               .total_seconds;
  return std::abs(predicted - sample.measured_seconds) /
         sample.measured_seconds;
}

std::string Microseconds(double seconds) {
  return absl::StrCat(std::round(seconds * 1e7) / 10, " us");
}

}  // namespace

ModelFitReport FitSpMicroBatches(const ModelSpec& model,
                                 const ClusterSpec& cluster,
                                 const std::vector<ProfileSample>& samples,
                                 CostParams& params) {
  ModelFitReport report;
  report.name = "sp_micro_batch";
  report.num_samples = static_cast<int>(samples.size());
  if (samples.size() < kNeeded) {
    report.note = absl::StrCat(samples.size(), " samples, need at least ",
                               kNeeded, "; keeping defaults");
    return report;
  }
  absl::StatusOr<Corrections> corrections =
      Solve(model, cluster, params, samples, /*skipped=*/-1);
  if (!corrections.ok()) {
    report.note = absl::StrCat("fit failed (", corrections.status().message(),
                               "); keeping defaults");
    return report;
  }
  CostParams fitted = params;
  Apply(*corrections, fitted);
  absl::StatusOr<CostModel> fitted_cost =
      CostModel::Create(model, cluster, fitted);
  if (!fitted_cost.ok()) {
    report.note = absl::StrCat("fit failed (", fitted_cost.status().message(),
                               "); keeping defaults");
    return report;
  }
  double sum_squares = 0;
  for (const ProfileSample& s : samples) {
    const double error = RelativeError(*fitted_cost, s);
    sum_squares += error * error;
    report.max_relative_error = std::max(report.max_relative_error, error);
  }
  report.rms_relative_error = std::sqrt(sum_squares / samples.size());
  double held_out_squares = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    absl::StatusOr<Corrections> without =
        Solve(model, cluster, params, samples, static_cast<int>(i));
    if (!without.ok()) continue;
    CostParams other = params;
    Apply(*without, other);
    absl::StatusOr<CostModel> other_cost =
        CostModel::Create(model, cluster, other);
    if (!other_cost.ok()) continue;
    const double error = RelativeError(*other_cost, samples[i]);
    held_out_squares += error * error;
    ++report.held_out_samples;
  }
  if (report.held_out_samples > 0) {
    report.held_out_rms_relative_error =
        std::sqrt(held_out_squares / report.held_out_samples);
  }
  std::vector<std::string> parts;
  auto all_to_all = [&](const char* where, double latency, double bandwidth,
                        const AllToAllRefitAccumulator::Fit& fit) {
    parts.push_back(absl::StrCat(
        "all-to-all ", where, " ", Microseconds(latency), " + bytes / ",
        absl::SixDigits(bandwidth / 1e9), " GB/s -> ",
        Microseconds(fit.latency_seconds), " + bytes / ",
        absl::SixDigits(fit.bus_bytes_per_second / 1e9), " GB/s"));
  };
  if (corrections->intra.has_value()) {
    all_to_all("in a node", params.comm.all_to_all_intra_latency_seconds,
               params.comm.all_to_all_intra_bus_bytes_per_second,
               *corrections->intra);
  }
  if (corrections->inter.has_value()) {
    all_to_all("across nodes", params.comm.all_to_all_inter_latency_seconds,
               params.comm.all_to_all_inter_bus_bytes_per_second,
               *corrections->inter);
  }
  if (corrections->ulysses_layer_fixed.has_value()) {
    parts.push_back(
        absl::StrCat(Microseconds(*corrections->ulysses_layer_fixed),
                     " per layer pass outside the all-to-alls"));
  }
  params = fitted;
  report.used_defaults = false;
  report.note =
      absl::StrCat("fitted to ", samples.size(),
                   " micro-batches at SP >= 2: ", absl::StrJoin(parts, ", "));
  return report;
}

}  // namespace dcp
