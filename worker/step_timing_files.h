// Per-step measured times of every rank, next to rank 0's run summary: each
// rank writes what it measured of each micro-batch of a step to its own
// small file, and rank 0 also writes the step's plan, its batch's lengths and
// the cost model it was priced with, so that a reader (the launcher) can lay
// the plan out (planner/simulate/timeline.h) and put the measured times beside the
// predicted ones. Every file is written atomically (common/atomic_file.h);
// each writer deletes its files older than kKeptStepTimings steps, so the
// directory stays bounded however long the run.

#ifndef DCP_WORKER_STEP_TIMING_FILES_H_
#define DCP_WORKER_STEP_TIMING_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cost_model/cost_model.h"
#include "planner/plan/plan.h"

namespace dcp {

/// Steps whose files each writer keeps (the latest ones).
inline constexpr int64_t kKeptStepTimings = 64;

/// Where the step files of the run summary at `summary_file` go:
/// "<summary_file>.steps".
std::string StepTimingDir(const std::string& summary_file);

/// What one rank measured of one step (the executor's own measurements).
/// Plain value.
struct RankStepTiming {
  int64_t step = 0;
  int rank = 0;
  /// Index into the plan's groups of this rank's group.
  int group_index = 0;
  /// Wall time of the whole step on this rank (the executor's RunStep).
  double step_seconds = 0;
  double gradient_allreduce_seconds = 0;
  struct MicroBatch {
    /// Forward + recompute + backward, less the all-to-alls.
    double compute_seconds = 0;
    /// Time inside the Ulysses all-to-alls.
    double communication_seconds = 0;
  };
  /// This rank's micro-batches, in plan order.
  std::vector<MicroBatch> micro_batches;

  /// step_seconds less every micro-batch's compute and communication
  /// (waiting for the slowest group, the all-reduce, the optimizer), >= 0.
  double IdleSeconds() const;
};

/// A step's plan as rank 0 ran it, with what it takes to price it again.
struct StepPlanFile {
  int64_t step = 0;
  Plan plan;
  /// The batch's sequence lengths (the plan's sequence indices index it).
  std::vector<int64_t> lengths_tokens;
  /// The parameter version the plan was made with (0 for local plans) and
  /// that of the cost model below: for the planner's plans rank 0 asks the
  /// planner for the plan's own version, so they are equal; bucket plans
  /// are priced with the planner's version current when the run began.
  int64_t plan_params_version = 0;
  int64_t cost_model_params_version = 0;
  /// The cost model: CostModel::Create(model, cluster, params).
  ModelSpec model;
  ClusterSpec cluster;
  CostParams params;

  absl::StatusOr<CostModel> MakeCostModel() const;
};

/// Writes `timing` to `dir` (created when missing) as
/// "step_<step>.rank_<rank>.json" and deletes this rank's file of step
/// `step - kKeptStepTimings`. Errors name the path.
absl::Status WriteRankStepTiming(const std::string& dir,
                                 const RankStepTiming& timing);

/// Writes `plan_file` to `dir` as "step_<step>.plan.json" and deletes that of
/// step `step - kKeptStepTimings`. Errors name the path.
absl::Status WriteStepPlanFile(const std::string& dir,
                               const StepPlanFile& plan_file);

/// Reads rank `rank`'s file of step `step`. NOT_FOUND when there is none;
/// DATA_LOSS naming the path and field for a file that is not one.
absl::StatusOr<RankStepTiming> ReadRankStepTiming(const std::string& dir,
                                                  int64_t step, int rank);

/// Reads step `step`'s plan file; errors as ReadRankStepTiming.
absl::StatusOr<StepPlanFile> ReadStepPlanFile(const std::string& dir,
                                              int64_t step);

}  // namespace dcp

#endif  // DCP_WORKER_STEP_TIMING_FILES_H_
