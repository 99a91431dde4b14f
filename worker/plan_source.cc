#include "worker/plan_source.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "planner/client/batch_fingerprint.h"
#include "planner/client/proto_convert.h"
#include "planner/plan/validate.h"
#include "planner/strategies/peer_registry.h"
#include "worker/status_context.h"

namespace dcp {
namespace {

std::vector<int64_t> Lengths(const std::vector<Sample>& samples) {
  std::vector<int64_t> lengths;
  lengths.reserve(samples.size());
  for (const Sample& sample : samples) lengths.push_back(sample.length_tokens);
  return lengths;
}

}  // namespace

v1::GlobalBatch GlobalBatchProto(const std::vector<Sample>& samples,
                                 int64_t step) {
  v1::GlobalBatch batch;
  batch.set_step(step);
  for (const Sample& sample : samples) {
    v1::Sample* proto = batch.add_samples();
    proto->set_id(sample.id);
    proto->set_length_tokens(sample.length_tokens);
  }
  return batch;
}

PlannerPlanSource::PlannerPlanSource(PlannerClient& planner,
                                     PlannerPlanSourceOptions options)
    : planner_(planner), options_(std::move(options)) {}

void PlannerPlanSource::BatchKnown(const std::vector<Sample>& samples,
                                   int64_t step) {
  if (!options_.submits_ahead) return;
  v1::SubmitBatchesRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_incarnation(options_.incarnation);
  *request.add_batches() = GlobalBatchProto(samples, step);
  absl::StatusOr<v1::SubmitBatchesResponse> response =
      planner_.SubmitBatches(request);
  if (!response.ok()) {
    options_.log(absl::StrCat("warning: SubmitBatches of step ", step,
                              " failed (it will be planned on demand): ",
                              response.status().ToString()));
  }
}

absl::StatusOr<PlanOfStep> PlannerPlanSource::PlanOf(
    const std::vector<Sample>& samples, int64_t step) {
  v1::GetPlanRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_incarnation(options_.incarnation);
  request.set_step(step);
  request.set_batch_fingerprint(BatchFingerprint(samples));
  absl::StatusOr<v1::GetPlanResponse> response = planner_.GetPlan(request);
  if (response.status().code() == absl::StatusCode::kFailedPrecondition) {
    *request.mutable_batch() = GlobalBatchProto(samples, step);
    response = planner_.GetPlan(request);
  }
  if (!response.ok()) {
    return WithContext(response.status(),
                       absl::StrCat("fetching the plan of step ", step));
  }
  if (response->plan().step() != step) {
    return absl::InternalError(absl::StrCat("asked for the plan of step ", step,
                                            " and got step ",
                                            response->plan().step()));
  }
  if (response->sample_ids_size() != 0) {
    bool same = response->sample_ids_size() == static_cast<int>(samples.size());
    for (int i = 0; same && i < response->sample_ids_size(); ++i) {
      same = response->sample_ids(i) == samples[i].id;
    }
    if (!same) {
      return absl::InternalError(absl::StrCat(
          "the plan of step ", step,
          " was made for other sample ids than this rank's batch; every "
          "rank must use the same --workload, seed and batch size"));
    }
  }
  PlanOfStep result;
  result.params_version = response->params_version();
  // Every rank checks the same plan, so all refuse a bad one together (an
  // index out of range would otherwise throw mid-step, and a sequence
  // planned twice or not at all would change the loss scale).
  absl::Status valid;
  if (response->plan().phases_size() > 0) {
    result.phased = PhasedPlanFromProto(response->plan());
    valid = ValidatePhasedPlanStructure(options_.model, options_.cluster,
                                        Lengths(samples), result.phased);
  } else {
    result.plan = PlanFromProto(response->plan());
    valid = ValidatePlanStructure(options_.model, options_.cluster,
                                  Lengths(samples), result.plan);
  }
  if (!valid.ok()) {
    return WithContext(valid, absl::StrCat("the plan of step ", step));
  }
  return result;
}

void PlannerPlanSource::StepMeasured(int64_t step,
                                     const StepMeasurement& measured) {
  const WorkerStepMetrics& totals = measured.totals;
  v1::ReportStepStatsRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_incarnation(options_.incarnation);
  request.set_step(step);
  request.set_rank(options_.rank);
  request.set_step_seconds(std::max(totals.step_seconds, 1e-9));
  const int count = static_cast<int>(measured.micro_batches.size());
  for (int m = 0; m < count; ++m) {
    const StepMeasurement::MicroBatch& micro = measured.micro_batches[m];
    v1::MicroBatchStats* stats = request.add_micro_batches();
    stats->set_micro_batch_index(m);
    stats->set_phase(micro.phase);
    stats->set_compute_seconds(std::max(0.0, micro.compute_seconds));
    stats->set_communication_seconds(
        std::max(0.0, micro.communication_seconds));
    // The wait at the step-end all-reduce follows the last micro-batch.
    stats->set_idle_seconds(m + 1 == count ? totals.idle_seconds : 0);
    stats->set_peak_memory_bytes(totals.peak_memory_bytes);
  }
  absl::StatusOr<v1::ReportStepStatsResponse> response =
      planner_.ReportStepStats(request);
  if (!response.ok()) {
    options_.log(absl::StrCat("warning: ReportStepStats of step ", step,
                              " failed: ", response.status().ToString()));
  }
}

absl::StatusOr<std::unique_ptr<StrategyPlanSource>> StrategyPlanSource::Create(
    PlannerClient& planner, const std::string& strategy,
    const StaticOptions& options,
    const std::function<
        absl::StatusOr<std::vector<std::vector<int64_t>>>()>& run_batches,
    const std::function<void(const std::string&)>& log, int rank) {
  absl::StatusOr<v1::GetClusterModelResponse> model =
      planner.GetClusterModel(v1::GetClusterModelRequest());
  if (!model.ok()) {
    return WithContext(model.status(), "asking the planner for its cost model");
  }
  absl::StatusOr<CostModel> cost_model =
      CostModel::Create(ModelSpecFromProto(model->model()),
                        ClusterSpecFromProto(model->cluster()),
                        CostParamsFromProto(model->params()));
  if (!cost_model.ok()) {
    return WithContext(cost_model.status(), "the planner's cost model");
  }
  std::unique_ptr<StrategyPlanSource> source(
      new StrategyPlanSource(*std::move(cost_model), rank));
  PeerOptions peer_options;
  peer_options.static_options = options;
  DCP_ASSIGN_OR_RETURN(
      source->strategy_,
      MakePeerStrategy(strategy, source->cost_model_, peer_options));
  if (source->strategy_->tuned_over_run()) {
    DCP_ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> batches,
                         run_batches());
    if (absl::Status tuned = source->strategy_->Tune(batches); !tuned.ok()) {
      return WithContext(tuned, absl::StrCat("tuning ", strategy, " on the ",
                                             batches.size(),
                                             " batches of the run"));
    }
  }
  const std::string setting = source->strategy_->setting();
  log(absl::StrCat(strategy, " plans from the planner's cost model v",
                   model->params_version(),
                   setting.empty() ? "" : absl::StrCat(" (", setting, ")")));
  return source;
}

absl::StatusOr<PlanOfStep> StrategyPlanSource::PlanOf(
    const std::vector<Sample>& samples, int64_t step) {
  const std::vector<int64_t> lengths = Lengths(samples);
  absl::StatusOr<StrategyPlan> planned = strategy_->PlanBatch(lengths);
  if (!planned.ok()) {
    return WithContext(planned.status(),
                       absl::StrCat("the ", strategy_->name(), " plan of step ",
                                    step));
  }
  PlanOfStep result;
  last_step_ = step;
  last_lengths_ = lengths;
  if (planned->IsPhased()) {
    result.phased = std::move(planned->phased);
    if (refitted_.has_value()) {
      PredictPhasedPlan(*refitted_, lengths, result.phased);
    }
    last_plan_ = Plan();
  } else {
    result.plan = std::move(planned->plan);
    if (refitted_.has_value()) PredictPlan(*refitted_, lengths, result.plan);
    last_plan_ = result.plan;
  }
  return result;
}

void StrategyPlanSource::StepMeasured(int64_t step,
                                    const StepMeasurement& measured) {
  if (step != last_step_) return;
  const GroupPlan* group = nullptr;
  for (const GroupPlan& candidate : last_plan_.groups) {
    if (std::find(candidate.ranks.begin(), candidate.ranks.end(), rank_) !=
        candidate.ranks.end()) {
      group = &candidate;
    }
  }
  if (group == nullptr) return;
  const ModelSpec& model = cost_model_.model();
  const int sp = static_cast<int>(group->ranks.size());
  const bool inter_node = cost_model_.SpansNodes(sp);
  const size_t count =
      std::min(group->micro_batches.size(), measured.micro_batches.size());
  for (size_t m = 0; m < count; ++m) {
    const MicroBatchPlan& micro_batch = group->micro_batches[m];
    const StepMeasurement::MicroBatch& seconds = measured.micro_batches[m];
    MicroBatchShape shape;
    shape.sp_size = sp;
    for (int index : micro_batch.sequence_indices) {
      shape.AddSequence(last_lengths_[index]);
    }
    if (shape.num_sequences == 0) continue;
    // Ratios relative to the fetched model, as the planner's are to its
    // profile fit.
    const MicroBatchCost cost =
        cost_model_.MicroBatch(shape, micro_batch.checkpointed_layers);
    const double predicted_compute =
        cost.total_seconds - cost.communication_seconds;
    if (predicted_compute > 0 && seconds.compute_seconds > 0 &&
        RefitAccumulator::Accepts(predicted_compute /
                                  seconds.compute_seconds)) {
      compute_.Add({{predicted_compute, seconds.compute_seconds}});
    }
    if (sp > 1 && seconds.communication_seconds > 0 &&
        std::isfinite(seconds.communication_seconds)) {
      (inter_node ? all_to_all_inter_ : all_to_all_intra_)
          .Add(AllToAllCalls(model, shape, micro_batch.checkpointed_layers),
               AllToAllBusBytes(model, shape, micro_batch.checkpointed_layers),
               seconds.communication_seconds);
    }
  }
  CostParams params = cost_model_.params();
  bool refitted = false;
  if (std::optional<double> factor = compute_.Factor(); factor.has_value()) {
    params = ScaleComputeTime(params, *factor);
    refitted = true;
  }
  for (const bool inter_node : {false, true}) {
    const std::optional<AllToAllRefitAccumulator::Fit> fit =
        (inter_node ? all_to_all_inter_ : all_to_all_intra_).Solve();
    if (fit.has_value()) {
      SetAllToAll(*fit, inter_node, params.comm);
      refitted = true;
    }
  }
  if (!refitted) return;
  absl::StatusOr<CostModel> model_refitted =
      CostModel::Create(model, cost_model_.cluster(), params);
  if (model_refitted.ok()) refitted_ = *std::move(model_refitted);
}

}  // namespace dcp
