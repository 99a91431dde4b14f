// Plan sources: where each training step's plan comes from. The planner's
// per-batch plans (GetPlan) or a peer strategy's plans made locally on the
// planner's cost model; the agent only sees StepPlanSource.

#ifndef DCP_WORKER_PLAN_SOURCE_H_
#define DCP_WORKER_PLAN_SOURCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_spec.h"
#include "cost_model/online_refit.h"
#include "planner/strategies/baselines.h"
#include "planner/strategies/strategy.h"
#include "planner/client/planner_client.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"
#include "planner/workload/workload.h"
#include "worker/worker_metrics.h"

namespace dcp {

/// A step's plan and the planner's cost-model parameter version it was made
/// with (0 for plans made locally). Plain value.
struct PlanOfStep {
  /// The plan of one layout; empty when `phased` has phases.
  Plan plan;
  /// A plan that re-groups the ranks within the step (two or more phases,
  /// world barriers between them); no phases for a plan of one layout.
  PhasedPlan phased;
  int64_t params_version = 0;

  bool IsPhased() const { return !phased.phases.empty(); }
};

/// What this rank measured of one step, for the source of its plan.
/// Plain value.
struct StepMeasurement {
  /// Totals over the step (WorkerStepMetrics' fields).
  WorkerStepMetrics totals;
  /// Per micro-batch of this rank, in plan order.
  struct MicroBatch {
    double compute_seconds = 0;
    double communication_seconds = 0;
    /// The phase of a phased plan it ran in (0 for one layout).
    int phase = 0;
  };
  std::vector<MicroBatch> micro_batches;
};

/// Where the plans of one rank's steps come from. Every rank of a world
/// uses the same kind of source over the same batches. Calls come in step
/// order: BatchKnown(step) as soon as the step's batch is drawn (one step
/// ahead), PlanOf(step), then StepMeasured(step) once it ran.
///
/// Not thread-safe: the training thread makes every call.
class StepPlanSource {
 public:
  virtual ~StepPlanSource() = default;

  /// Step `step` will train on `samples`.
  virtual void BatchKnown(const std::vector<Sample>& samples, int64_t step) = 0;

  /// The plan of step `step`, whose batch is `samples`; errors say which
  /// step's plan could not be had and why.
  virtual absl::StatusOr<PlanOfStep> PlanOf(const std::vector<Sample>& samples,
                                          int64_t step) = 0;

  /// This rank ran step `step` and measured `measured`.
  virtual void StepMeasured(int64_t step, const StepMeasurement& measured) = 0;
};

struct PlannerPlanSourceOptions {
  std::string worker_id;
  /// This process's incarnation (RendezvousOptions::incarnation), sent with
  /// every call.
  std::string incarnation;
  int rank = 0;
  /// Submit each batch as soon as it is known (SubmitBatches), so the
  /// planner plans it ahead; one rank (rank 0) does.
  bool submits_ahead = false;
  /// What the plans are checked against.
  ModelSpec model;
  ClusterSpec cluster;
  /// Warnings, one line each; required.
  std::function<void(const std::string&)> log;
};

/// The planner's plans. PlanOf asks by step with the batch's fingerprint (a
/// few bytes; the batch was submitted ahead), and with the whole batch when
/// the planner does not know the step (yet, or any more):
/// FAILED_PRECONDITION. A batch that really differs from the planner's
/// fails that second call too. Every plan is checked against the batch and
/// ValidatePlanStructure (a plan of phases: ValidatePhasedPlanStructure),
/// so every rank refuses a bad plan together.
/// StepMeasured reports to the planner (ReportStepStats). A failed
/// SubmitBatches or ReportStepStats is only a warning.
///
/// Not thread-safe (see StepPlanSource); `planner` must outlive it.
class PlannerPlanSource final : public StepPlanSource {
 public:
  PlannerPlanSource(PlannerClient& planner, PlannerPlanSourceOptions options);

  void BatchKnown(const std::vector<Sample>& samples, int64_t step) override;
  absl::StatusOr<PlanOfStep> PlanOf(const std::vector<Sample>& samples,
                                  int64_t step) override;
  void StepMeasured(int64_t step, const StepMeasurement& measured) override;

 private:
  PlannerClient& planner_;
  const PlannerPlanSourceOptions options_;
};

/// A peer strategy's plans (bucket, best-static, megatron-dyncp, any of
/// planner/strategies/peer_registry.h), made locally on the
/// planner's cost model, to run the same batches the way that strategy
/// would. A strategy tuned over a run (best-static's setting, the Megatron
/// caps) is tuned on the run's batches, given up front. Reports nothing.
///
/// Not thread-safe (see StepPlanSource).
///
/// Its predictions get the planner's kind of online refit, made on this
/// rank from its own measurements of steps of one layout: the compute time
/// scaled by the micro-batches' measured over predicted compute seconds
/// (RefitAccumulator), and the all-to-all latency and bandwidth fitted to
/// their measured all-to-all seconds (AllToAllRefitAccumulator).
/// The plans themselves always come from the fetched cost model, so that
/// every rank makes the same ones; only their predicted seconds are priced
/// with the refitted one.
class StrategyPlanSource final : public StepPlanSource {
 public:
  /// Fetches the planner's cost model (GetClusterModel) once and makes
  /// `strategy` on it; a strategy tuned over the run is tuned on what
  /// `run_batches` returns (each batch's lengths; called only then, and its
  /// error returned). `rank`
  /// is this rank's (whose measurements StepMeasured gets).
  /// INVALID_ARGUMENT for a name that is not a peer's (MakePeerStrategy);
  /// the tuner's errors.
  static absl::StatusOr<std::unique_ptr<StrategyPlanSource>> Create(
      PlannerClient& planner, const std::string& strategy,
      const StaticOptions& options,
      const std::function<
          absl::StatusOr<std::vector<std::vector<int64_t>>>()>& run_batches,
      const std::function<void(const std::string&)>& log, int rank = 0);

  void BatchKnown(const std::vector<Sample>&, int64_t) override {}
  absl::StatusOr<PlanOfStep> PlanOf(const std::vector<Sample>& samples,
                                  int64_t step) override;
  void StepMeasured(int64_t step, const StepMeasurement& measured) override;

  /// The cost model the predictions are priced with (the fetched one until
  /// enough micro-batches were measured).
  const CostModel& pricing_model() const {
    return refitted_.has_value() ? *refitted_ : cost_model_;
  }

 private:
  StrategyPlanSource(CostModel cost_model, int rank)
      : cost_model_(std::move(cost_model)), rank_(rank) {}

  const CostModel cost_model_;
  // Plans on cost_model_ (which it refers to).
  std::unique_ptr<Strategy> strategy_;
  const int rank_;
  // The last step planned, whose measurements come next (its plan empty
  // for a step of phases: those are not refitted from).
  int64_t last_step_ = -1;
  Plan last_plan_;
  std::vector<int64_t> last_lengths_;
  RefitAccumulator compute_;
  AllToAllRefitAccumulator all_to_all_intra_;
  AllToAllRefitAccumulator all_to_all_inter_;
  std::optional<CostModel> refitted_;
};

/// `samples` as the planner's step `step`.
v1::GlobalBatch GlobalBatchProto(const std::vector<Sample>& samples,
                                 int64_t step);

}  // namespace dcp

#endif  // DCP_WORKER_PLAN_SOURCE_H_
