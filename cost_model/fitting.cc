#include "cost_model/fitting.h"

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cost_model/activation_memory_fit.h"
#include "cost_model/micro_batch_fit.h"
#include "cost_model/sp_micro_batch_fit.h"
#include "cost_model/sub_model_fit.h"

namespace dcp {
namespace {

// A compute sub-model fitted as a rate curve (sub_model_fit.h).
struct RateCurveFit {
  const char* name;
  double ComputeParams::*flops_per_second;
  double ComputeParams::*half;
  const char* half_name;
};

constexpr RateCurveFit kRateCurveFits[] = {
    {"gemm", &ComputeParams::gemm_flops_per_second,
     &ComputeParams::gemm_half_efficiency_tokens, "half-efficiency tokens"},
    {"attention_forward", &ComputeParams::attention_forward_flops_per_second,
     &ComputeParams::attention_forward_half_length_tokens,
     "half-efficiency length"},
    {"attention_backward", &ComputeParams::attention_backward_flops_per_second,
     &ComputeParams::attention_backward_half_length_tokens,
     "half-efficiency length"},
};

// A collective's sub-models inside and across nodes, each fitted as latency
// plus bus bytes over bandwidth.
struct CollectiveFit {
  ProfileSample::Op op;
  const CollectiveFields* fields;
};

// The all-to-all's and all-reduce's, reported before the activation memory.
constexpr CollectiveFit kSpAndGradientCollectiveFits[] = {
    {ProfileSample::Op::kAllToAll, &kAllToAllFields},
    {ProfileSample::Op::kAllReduce, &kAllReduceFields},
};

// ZeRO-1's reduce-scatter and all-gather, reported after it.
constexpr CollectiveFit kZeroCollectiveFits[] = {
    {ProfileSample::Op::kReduceScatter, &kReduceScatterFields},
    {ProfileSample::Op::kAllGather, &kAllGatherFields},
};

// The samples sorted by sub-model: the op-level ones in linear form, the
// rest as they are.
struct SortedSamples {
  // By ProfileOpName: "gemm", "attention_forward", "attention_backward".
  std::map<std::string, LinearProblem> rate_curves;
  // By (op, inter_node).
  std::map<std::pair<ProfileSample::Op, bool>, LinearProblem> collectives;
  std::vector<ProfileSample> memory;
  std::vector<ProfileSample> micro_batches;
  std::vector<ProfileSample> optimizer_steps;
  std::vector<ProfileSample> sp_micro_batches;
};

SortedSamples SortSamples(absl::Span<const ProfileSample> samples) {
  SortedSamples sorted;
  for (const ProfileSample& s : samples) {
    switch (s.op) {
      case ProfileSample::Op::kGemm:
        sorted.rate_curves[ProfileOpName(s.op)].Add(
            {s.flops, s.flops / s.tokens}, 0, s.measured_seconds);
        break;
      case ProfileSample::Op::kAttentionForward:
      case ProfileSample::Op::kAttentionBackward: {
        const bool backward = s.op == ProfileSample::Op::kAttentionBackward;
        const double quadratic =
            s.flops * (backward ? ComputeModel::kBackwardAttentionFactor : 1);
        sorted.rate_curves[ProfileOpName(s.op)].Add(
            {quadratic, quadratic * s.sum_lengths / s.sum_squared_lengths}, 0,
            s.measured_seconds);
        break;
      }
      case ProfileSample::Op::kAllToAll:
      case ProfileSample::Op::kAllReduce:
      case ProfileSample::Op::kReduceScatter:
      case ProfileSample::Op::kAllGather:
        sorted.collectives[{s.op, s.inter_node}].Add({1, BusBytes(s)}, 0,
                                                     s.measured_seconds);
        break;
      case ProfileSample::Op::kActivationMemory:
        sorted.memory.push_back(s);
        break;
      case ProfileSample::Op::kMicroBatch:
        sorted.micro_batches.push_back(s);
        break;
      case ProfileSample::Op::kOptimizerStep:
        sorted.optimizer_steps.push_back(s);
        break;
      case ProfileSample::Op::kSpMicroBatch:
        sorted.sp_micro_batches.push_back(s);
        break;
    }
  }
  return sorted;
}

// Fits each collective of `fits` into `comm` inside and then across nodes,
// one report each.
void FitCollectives(absl::Span<const CollectiveFit> fits, SortedSamples& sorted,
                    CommParams& comm, std::vector<ModelFitReport>& reports) {
  for (const CollectiveFit& fit : fits) {
    for (const bool inter_node : {false, true}) {
      const CommLinkFields& link = fit.fields->On(inter_node);
      reports.push_back(FitSubModel(
          absl::StrCat(ProfileOpName(fit.op), inter_node ? "_inter" : "_intra"),
          2, /*secondary_column=*/0, sorted.collectives[{fit.op, inter_node}],
          ApplyAlphaBeta(&(comm.*link.latency_seconds),
                         &(comm.*link.bus_bytes_per_second))));
    }
  }
}

}  // namespace

absl::StatusOr<CostModelFit> FitCostModel(
    const ModelSpec& model, const ClusterSpec& cluster,
    const CostParams& defaults, absl::Span<const ProfileSample> samples) {
  if (absl::Status s = ValidateModelSpec(model); !s.ok()) return s;
  if (absl::Status s = ValidateClusterSpec(cluster); !s.ok()) return s;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (absl::Status s = ValidateProfileSample(samples[i], i, model.num_layers);
        !s.ok()) {
      return s;
    }
  }
  SortedSamples sorted = SortSamples(samples);

  CostModelFit result;
  result.params = defaults;
  ComputeParams& compute = result.params.compute;
  CommParams& comm = result.params.comm;
  for (const RateCurveFit& fit : kRateCurveFits) {
    result.reports.push_back(FitSubModel(
        fit.name, 2, /*secondary_column=*/1, sorted.rate_curves[fit.name],
        ApplyRateCurve(&(compute.*fit.flops_per_second), &(compute.*fit.half),
                       fit.half_name)));
  }
  FitCollectives(kSpAndGradientCollectiveFits, sorted, comm, result.reports);
  result.reports.push_back(FitActivationMemory(
      model, cluster, defaults, sorted.memory, result.params.memory));
  FitCollectives(kZeroCollectiveFits, sorted, comm, result.reports);
  result.reports.push_back(
      FitMicroBatches(model, sorted.micro_batches, compute));
  result.reports.push_back(FitOptimizerStep(sorted.optimizer_steps, compute));
  result.reports.push_back(FitSpMicroBatches(
      model, cluster, sorted.sp_micro_batches, result.params));
  return result;
}

}  // namespace dcp
