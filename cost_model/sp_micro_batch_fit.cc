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

namespace dcp {
namespace {

double Passes(const ModelSpec& model, const ProfileSample& sample) {
  return 2.0 * model.num_layers + sample.checkpointed_layers;
}

constexpr size_t kNeeded = 2;

// What the samples (all but `skipped`) say, each correction present when
// enough samples inform it.
struct Corrections {
  std::optional<double> intra_latency;
  std::optional<double> inter_latency;
  std::optional<double> intra_bandwidth;
  std::optional<double> inter_bandwidth;
  std::optional<double> ulysses_layer_fixed;
};

// Least squares of measured = a * calls + b * bus_bytes over one kind of
// group, unweighted (the samples are means, and a step pays the mean: see
// the header): both when the samples tell them apart and both come out
// physical (a >= 0, b > 0), else a alone with b held at `held_b`.
class AllToAllInSitu {
 public:
  explicit AllToAllInSitu(double held_b) : held_b_(held_b) {}

  void Add(double calls, double bus_bytes, double measured) {
    xx_ += calls * calls;
    xy_ += calls * bus_bytes;
    yy_ += bus_bytes * bus_bytes;
    x1_ += calls * measured;
    y1_ += bus_bytes * measured;
    ++count_;
  }
  // (latency, seconds per bus byte), or nullopt with too few samples.
  std::optional<std::pair<double, double>> Solve() const {
    if (count_ < kNeeded || !(xx_ > 0)) return std::nullopt;
    const double det = xx_ * yy_ - xy_ * xy_;
    if (count_ >= 2 * kNeeded && det > 1e-9 * xx_ * yy_) {
      const double a = (x1_ * yy_ - y1_ * xy_) / det;
      const double b = (xx_ * y1_ - xy_ * x1_) / det;
      if (a >= 0 && b > 0) return std::make_pair(a, b);
    }
    // sum x (a x + held_b y - m) = 0.
    return std::make_pair(std::max(0.0, (x1_ - held_b_ * xy_) / xx_), held_b_);
  }

 private:
  double held_b_;
  // Sums of x x, x y, y y, x m and y m (x: calls, y: bus bytes).
  double xx_ = 0, xy_ = 0, yy_ = 0, x1_ = 0, y1_ = 0;
  size_t count_ = 0;
};

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
  // Relative-error least squares: communication = latency * calls + bus
  // bytes / bandwidth per kind of group (AllToAllInSitu), and u * passes =
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
  const CommParams& comm = base.comm;
  AllToAllInSitu intra(1 / comm.all_to_all_intra_bus_bytes_per_second);
  AllToAllInSitu inter(1 / comm.all_to_all_inter_bus_bytes_per_second);
  Sums outside_fixed;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (static_cast<int>(i) == skipped) continue;
    const ProfileSample& s = samples[i];
    const MicroBatchShape shape = ShapeOfMicroBatchSample(s);
    const double passes = Passes(model, s);
    const double latency = s.inter_node ? comm.all_to_all_inter_latency_seconds
                                        : comm.all_to_all_intra_latency_seconds;
    const double bandwidth = s.inter_node
                                 ? comm.all_to_all_inter_bus_bytes_per_second
                                 : comm.all_to_all_intra_bus_bytes_per_second;
    // The bus bytes of its all-to-alls: the bytes term at the profiled
    // bandwidth, times that bandwidth.
    const double bus_bytes =
        passes * (cost->UlyssesLayerSeconds(shape) - 2 * latency) * bandwidth;
    if (s.communication_seconds > 0) {
      (s.inter_node ? inter : intra)
          .Add(2 * passes, bus_bytes, s.communication_seconds);
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
  Corrections corrections;
  if (auto fit = intra.Solve(); fit.has_value()) {
    corrections.intra_latency = fit->first;
    corrections.intra_bandwidth = 1 / fit->second;
  }
  if (auto fit = inter.Solve(); fit.has_value()) {
    corrections.inter_latency = fit->first;
    corrections.inter_bandwidth = 1 / fit->second;
  }
  corrections.ulysses_layer_fixed = outside_fixed.Solution();
  return corrections;
}

void Apply(const Corrections& corrections, CostParams& params) {
  if (corrections.intra_latency.has_value()) {
    params.comm.all_to_all_intra_latency_seconds = *corrections.intra_latency;
    params.comm.all_to_all_intra_bus_bytes_per_second =
        *corrections.intra_bandwidth;
  }
  if (corrections.inter_latency.has_value()) {
    params.comm.all_to_all_inter_latency_seconds = *corrections.inter_latency;
    params.comm.all_to_all_inter_bus_bytes_per_second =
        *corrections.inter_bandwidth;
  }
  if (corrections.ulysses_layer_fixed.has_value()) {
    params.compute.ulysses_layer_fixed_seconds =
        *corrections.ulysses_layer_fixed;
  }
}

// Relative error of the whole micro-batch `sample` under `params`.
absl::StatusOr<double> RelativeError(const ModelSpec& model,
                                     const ClusterSpec& cluster,
                                     const CostParams& params,
                                     const ProfileSample& sample) {
  absl::StatusOr<CostModel> cost = CostModel::Create(model, cluster, params);
  if (!cost.ok()) return cost.status();
  const double predicted = cost->MicroBatch(ShapeOfMicroBatchSample(sample),
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
  double sum_squares = 0;
  for (const ProfileSample& s : samples) {
    absl::StatusOr<double> error = RelativeError(model, cluster, fitted, s);
    if (!error.ok()) {
      report.note = absl::StrCat("fit failed (", error.status().message(),
                                 "); keeping defaults");
      return report;
    }
    sum_squares += *error * *error;
    report.max_relative_error = std::max(report.max_relative_error, *error);
  }
  report.rms_relative_error = std::sqrt(sum_squares / samples.size());
  double held_out_squares = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    absl::StatusOr<Corrections> without =
        Solve(model, cluster, params, samples, static_cast<int>(i));
    if (!without.ok()) continue;
    CostParams other = params;
    Apply(*without, other);
    absl::StatusOr<double> error =
        RelativeError(model, cluster, other, samples[i]);
    if (!error.ok()) continue;
    held_out_squares += *error * *error;
    ++report.held_out_samples;
  }
  if (report.held_out_samples > 0) {
    report.held_out_rms_relative_error =
        std::sqrt(held_out_squares / report.held_out_samples);
  }
  std::vector<std::string> parts;
  auto all_to_all = [&](const char* where, double latency, double bandwidth,
                        double new_latency, double new_bandwidth) {
    parts.push_back(
        absl::StrCat("all-to-all ", where, " ", Microseconds(latency),
                     " + bytes / ", absl::SixDigits(bandwidth / 1e9),
                     " GB/s -> ", Microseconds(new_latency), " + bytes / ",
                     absl::SixDigits(new_bandwidth / 1e9), " GB/s"));
  };
  if (corrections->intra_latency.has_value()) {
    all_to_all("in a node", params.comm.all_to_all_intra_latency_seconds,
               params.comm.all_to_all_intra_bus_bytes_per_second,
               *corrections->intra_latency, *corrections->intra_bandwidth);
  }
  if (corrections->inter_latency.has_value()) {
    all_to_all("across nodes", params.comm.all_to_all_inter_latency_seconds,
               params.comm.all_to_all_inter_bus_bytes_per_second,
               *corrections->inter_latency, *corrections->inter_bandwidth);
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
