#include "cost_model/online_refit.h"

#include <algorithm>
#include <cmath>

namespace dcp {

void RefitAccumulator::Add(const std::vector<Observation>& observations) {
  for (const Observation& o : observations) {
    predicted_sum_ += o.predicted;
    measured_sum_ += o.measured;
    ++count_;
  }
}

void RefitAccumulator::Remove(const std::vector<Observation>& observations) {
  for (const Observation& o : observations) {
    predicted_sum_ -= o.predicted;
    measured_sum_ -= o.measured;
    --count_;
  }
}

void AllToAllRefitAccumulator::Add(double calls, double bus_bytes,
                                   double measured_seconds) {
  calls_calls_ += calls * calls;
  calls_bytes_ += calls * bus_bytes;
  bytes_bytes_ += bus_bytes * bus_bytes;
  calls_ += calls * measured_seconds;
  bytes_ += bus_bytes * measured_seconds;
  ++count_;
}

void AllToAllRefitAccumulator::Remove(double calls, double bus_bytes,
                                      double measured_seconds) {
  calls_calls_ -= calls * calls;
  calls_bytes_ -= calls * bus_bytes;
  bytes_bytes_ -= bus_bytes * bus_bytes;
  calls_ -= calls * measured_seconds;
  bytes_ -= bus_bytes * measured_seconds;
  --count_;
}

std::optional<AllToAllRefitAccumulator::Fit> AllToAllRefitAccumulator::Solve()
    const {
  if (count_ < RefitAccumulator::kMinObservations || bytes_bytes_ <= 0) {
    return std::nullopt;
  }
  // Normal equations of min sum (m - alpha c - beta b)^2.
  const double det = calls_calls_ * bytes_bytes_ - calls_bytes_ * calls_bytes_;
  double alpha = 0;
  double beta = bytes_ / bytes_bytes_;
  if (det > 1e-9 * calls_calls_ * bytes_bytes_) {
    alpha = (calls_ * bytes_bytes_ - bytes_ * calls_bytes_) / det;
    beta = (bytes_ * calls_calls_ - calls_ * calls_bytes_) / det;
    if (alpha < 0) {
      alpha = 0;
      beta = bytes_ / bytes_bytes_;
    }
  } else {
    return std::nullopt;
  }
  if (!(beta > 0) || !std::isfinite(alpha) || !std::isfinite(beta)) {
    return std::nullopt;
  }
  return Fit{alpha, 1.0 / beta};
}

std::optional<double> RefitAccumulator::Factor() const {
  if (count_ < kMinObservations || !(predicted_sum_ > 0)) {
    return std::nullopt;
  }
  // Finite: every observation's ratio lies in [1 / kMaxRatio, kMaxRatio].
  return std::clamp(measured_sum_ / predicted_sum_, kMinFactor, kMaxFactor);
}

CostParams ScaleComputeTime(CostParams params, double factor) {
  ComputeParams& compute = params.compute;
  ScaleOpTimes(factor, factor, compute);
  compute.layer_fixed_seconds *= factor;
  compute.micro_batch_fixed_seconds *= factor;
  compute.sequence_layer_fixed_seconds *= factor;
  compute.ulysses_layer_fixed_seconds *= factor;
  return params;
}

CostParams ScaleCommunicationTime(CostParams params, double factor) {
  CommParams& comm = params.comm;
  comm.all_to_all_intra_latency_seconds *= factor;
  comm.all_to_all_inter_latency_seconds *= factor;
  comm.all_to_all_intra_bus_bytes_per_second /= factor;
  comm.all_to_all_inter_bus_bytes_per_second /= factor;
  return params;
}

std::optional<AllToAllRefitAccumulator::Fit>
AllToAllRefitAccumulator::SolveLatency(double bus_bytes_per_second) const {
  if (count_ < 1 || !(calls_calls_ > 0)) return std::nullopt;
  // sum c (alpha c + b / bandwidth - m) = 0.
  const double alpha =
      (calls_ - calls_bytes_ / bus_bytes_per_second) / calls_calls_;
  return Fit{std::max(0.0, alpha), bus_bytes_per_second};
}

void SetAllToAll(const AllToAllRefitAccumulator::Fit& fit, bool inter_node,
                 CommParams& comm) {
  const CommLinkFields& link = kAllToAllFields.On(inter_node);
  comm.*link.latency_seconds = fit.latency_seconds;
  comm.*link.bus_bytes_per_second = fit.bus_bytes_per_second;
}

double AllToAllCalls(const ModelSpec& model, const MicroBatchShape& shape,
                     int checkpointed_layers) {
  if (shape.sp_size <= 1) return 0;
  return 2 * (2.0 * model.num_layers + checkpointed_layers);
}

double AllToAllBusBytes(const ModelSpec& model, const MicroBatchShape& shape,
                        int checkpointed_layers) {
  const int sp = shape.sp_size;
  if (sp <= 1) return 0;
  const double passes = 2.0 * model.num_layers + checkpointed_layers;
  return passes * model.UlyssesBytesPerTokenPerLayer(sp) *
         static_cast<double>(shape.tokens_per_rank) * (sp - 1) / sp;
}

}  // namespace dcp
