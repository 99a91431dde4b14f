#ifndef DCP_PLANNER_SERVICE_STEP_PLAN_H_
#define DCP_PLANNER_SERVICE_STEP_PLAN_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "cost_model/micro_batch_refit.h"
#include "dcp/v1/planner_service.pb.h"
#include "dcp/v1/step_state.pb.h"
#include "planner/search/planner.h"
#include "planner/service/cost_params_registry.h"

namespace dcp {

/// What a computed plan predicts per group, for checking reports.
struct GroupSummary {
  double predicted_seconds = 0;
  /// Predicted compute (not communication) seconds of each micro-batch.
  std::vector<double> micro_batch_compute_seconds;
  /// Predicted all-to-all seconds of each micro-batch.
  std::vector<double> micro_batch_communication_seconds;
  /// What each micro-batch's all-to-alls move, whatever the parameters:
  /// their count and bus bytes ((n-1)/n of the bytes each rank holds).
  std::vector<double> micro_batch_all_to_all_calls;
  std::vector<double> micro_batch_all_to_all_bus_bytes;
  /// The SP size of each micro-batch's group (a phased plan's rank runs
  /// micro-batches of several groups).
  std::vector<int> micro_batch_sp_sizes;
  /// The group spans nodes (its all-to-alls use the inter-node figures).
  bool inter_node = false;
  /// Each micro-batch's row of the micro-batch refit
  /// (cost_model/micro_batch_refit.h): {op-level work seconds at the
  /// profile fit's rates (the plan version's work over its
  /// compute_correction), 1, layer passes, sequences * layer passes}.
  std::vector<MicroBatchRefit::Row> micro_batch_fit_rows;
};

/// The shape of a plan, as PlannerMetrics::PlanShape reports it.
struct PlanShapeStats {
  std::map<int, int> groups_by_sp_size;
  int micro_batches = 0;
  double mean_checkpointed_layers = 0;
  int max_checkpointed_layers = 0;
};

/// The outcome of planning one step. Immutable once made; shared by every
/// request for the step.
struct PlannedStep {
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
  PlanShapeStats shape;
  /// Seconds the planner core (and the lower bound) took.
  double planning_seconds = 0;
  double predicted_step_seconds = 0;
  double lower_bound_seconds = 0;
  /// (predicted - lower bound) / lower bound.
  double gap_to_lower_bound = 0;
  /// Layouts the step runs in: more than 1 for a plan that re-groups the
  /// ranks within the step (GetPlanResponse.plan.phases). Its `groups` and
  /// `group_of_rank` are then per rank: rank r's summary is groups[r], its
  /// micro-batches those of its group in each phase, phase after phase
  /// (the order the workers report them in), predicted the whole step.
  int num_phases = 1;
};

/// When MakeStepPlan also tries plans that re-group the ranks within the
/// step (dcp_planner --phased-plans, on by default). Plain value.
struct PhasedPlanningOptions {
  bool enabled = true;
  /// The lower bound bounds phased plans too, so a phased plan can gain at
  /// most the single-layout plan's gap to it: the phased search (several
  /// planner calls) runs only for a gap of at least this.
  double min_gap_to_try = 0.03;
};

/// Makes the plan of `batch` with `params` (planner call, lower bound,
/// serialized variants, per-group predictions and plan-shape statistics).
/// Pure but for reading `clock` to time the planner. An unplannable batch
/// gives a PlannedStep whose status says why (prefixed with the step).
std::shared_ptr<const PlannedStep> MakeStepPlan(const v1::GlobalBatch& batch,
                                             const ParamsVersion& params,
                                             const PlannerOptions& options,
                                             int world_size,
                                             const Clock& clock);

/// MakeStepPlan with `phased`: the plan is PlanPhasedBatch's
/// (planner/search/phased_planner.h), which tries phases only where `phased`
/// is enabled (or under ZeRO-3, whose groups run in lockstep anyway) and
/// the single layout's gap to the lower bound is at least min_gap_to_try,
/// and keeps the single layout unless a phased plan is predicted strictly
/// faster. MakeStepPlan is this with the default PhasedPlanningOptions.
std::shared_ptr<const PlannedStep> MakeStepPlanTryingPhases(
    const v1::GlobalBatch& batch, const ParamsVersion& params,
    const PlannerOptions& options, int world_size, const Clock& clock,
    const PhasedPlanningOptions& phased);

/// The planner core's predicted CPU seconds for a batch of `num_sequences`:
/// near-linear in n since the search groups near-identical lengths (2^20
/// sequences took 2.5-2.8 s of CPU on 4,096 GPUs and 4.5 s on 32 GPUs on
/// this project's 2-core machine, under load), so 6 s per 2^20 sequences.
/// Only for bounding the work that waits to be planned, so it errs high;
/// refit it when the core changes (planner/search/planner_benchmark).
double PredictedPlanningSeconds(int64_t num_sequences);

/// The bytes `plan` holds in memory: its response as protobuf measures it,
/// both serialized forms and its per-rank summaries (what a cached plan
/// costs the planner's memory budget).
int64_t PlannedStepBytes(const PlannedStep& plan);

/// The durable record of a successful `plan` of `batch` made with `params`
/// (proto/dcp/v1/step_state.proto): the plan, the batch's lengths and the
/// cost model that priced it.
v1::StepPlanRecord MakeStepPlanRecord(const v1::GlobalBatch& batch,
                                      const PlannedStep& plan,
                                      const ParamsVersion& params);

/// MakeStepPlan's signature; tests substitute a slow or blocking planner.
using MakeStepPlanFunction = std::function<std::shared_ptr<const PlannedStep>(
    const v1::GlobalBatch& batch, const ParamsVersion& params,
    const PlannerOptions& options, int world_size, const Clock& clock)>;

/// MakeStepPlanTryingPhases with `phased`, as a MakeStepPlanFunction.
MakeStepPlanFunction StepPlanMaker(PhasedPlanningOptions phased);

/// One line describing a planned step for the log ("step 3: SP sizes 8x2
/// 4x1, 12 micro-batches, predicted 7.28 s, lower bound ... planned in
/// 12.0 ms").
std::string DescribeStepPlan(int64_t step, const PlannedStep& plan);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_STEP_PLAN_H_
