#ifndef DCP_PLANNER_SERVICE_STEP_STATS_TRACKER_H_
#define DCP_PLANNER_SERVICE_STEP_STATS_TRACKER_H_

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cost_model/micro_batch_refit.h"
#include "cost_model/online_refit.h"
#include "dcp/v1/planner_service.pb.h"
#include "dcp/v1/step_state.pb.h"
#include "planner/service/cost_params_registry.h"
#include "planner/service/step_plan.h"

namespace dcp {

/// The ranks' step reports of the steps whose plans are cached: cost-model
/// error, step imbalance, the online refit's sums and, when asked to, the
/// step reports records to write (proto/dcp/v1/step_state.proto).
///
/// Thread model: `mu_` guards everything; no I/O and no other manager is
/// called. What it needs of the plan cache and the parameter registry comes
/// in as immutable snapshots (PlannedStep, CostParamsSnapshot); a refit it
/// asks for is applied by the caller.
class StepStatsTracker {
 public:
  /// What one report changed.
  struct Outcome {
    double measured_over_predicted = 0;
    /// |measured - predicted| / measured, when there is a prediction.
    std::optional<double> relative_error;
    /// Set when this report completed its step (every rank reported).
    std::optional<double> imbalance;
    /// Set when the completed step asks for a refit by this factor (of the
    /// refit epoch `refit_epoch`, from `refit_observations` measurements).
    std::optional<double> refit_factor;
    /// Set with refit_factor when micro-batches at SP 1 and at SP >= 2 both
    /// have enough measurements: refit_factor is then the SP-1 micro-batches'
    /// factor, and this the SP >= 2 ones' factor over it (the profile fit's
    /// ComputeParams::sp_compute_scale times this is the refit's). Without
    /// it refit_factor pools every micro-batch.
    std::optional<double> sp_compute_scale;
    /// Likewise for the all-to-all time, from the micro-batches' measured
    /// communication seconds (unset without enough of them).
    std::optional<double> communication_refit_factor;
    /// The all-to-all latency and bandwidth fitted to the micro-batches'
    /// measurements (inside a node, across nodes), when there are enough.
    std::optional<AllToAllRefitAccumulator::Fit> all_to_all_intra;
    std::optional<AllToAllRefitAccumulator::Fit> all_to_all_inter;
    /// The micro-batch model's terms {rate scale, per micro-batch, per
    /// layer pass, per sequence and layer pass} fitted to the measured
    /// micro-batches (cost_model/micro_batch_refit.h), when enough distinct
    /// rows tell them apart; refit_factor is the fallback without it.
    std::optional<MicroBatchRefit::Coefficients> micro_batch_fit;
    int64_t micro_batch_fit_rows = 0;
    int64_t refit_epoch = 0;
    int64_t refit_observations = 0;
    /// With `record_reports`: the reports records this report asks to
    /// write. Set when it completes its step (every rank with a group in
    /// the plan reported) or reports again to a complete step: that step's
    /// record, and those of earlier steps with reports not yet written
    /// (some of whose ranks may never report).
    std::vector<v1::StepReportsRecord> reports_to_record;
  };

  /// `micro_batch_refit`: with `online_refit`, also offer the micro-batch
  /// model's fitted terms (Outcome::micro_batch_fit); off, only the single
  /// compute factor and the all-to-all fits. `warmup_steps`: the reports
  /// of the first that many steps (counted from the first step reported)
  /// count towards the error but not the refit: they pay one-time costs.
  StepStatsTracker(int world_size, bool online_refit,
                   bool record_reports = false, bool micro_batch_refit = false,
                   int warmup_steps = 0)
      : world_size_(world_size),
        online_refit_(online_refit),
        record_reports_(record_reports),
        micro_batch_refit_enabled_(micro_batch_refit),
        warmup_steps_(warmup_steps) {}

  /// Records a validated report of a rank of `plan`, planned with version
  /// `plan_version` (whose correction is `plan_correction`) while `params`
  /// is current. INVALID_ARGUMENT / FAILED_PRECONDITION if the rank or a
  /// micro-batch is not in the plan.
  /// `plan_communication_correction` is that version's all-to-all
  /// correction.
  /// `plan_sp_compute_correction` is that version's sp_compute_scale over
  /// the profile fit's (what it applied beyond `plan_correction` to the
  /// compute of micro-batches at SP >= 2).
  absl::StatusOr<Outcome> Record(const v1::ReportStepStatsRequest& request,
                                 const PlannedStep& plan, double plan_correction,
                                 const CostParamsSnapshot& params,
                                 double plan_communication_correction = 1,
                                 double plan_sp_compute_correction = 1)
      ABSL_LOCKS_EXCLUDED(mu_);
  /// Drops the reports of steps whose plans left the cache (and their
  /// rows from the micro-batch refit).
  void Forget(const std::vector<int64_t>& steps) ABSL_LOCKS_EXCLUDED(mu_);
  /// The mean relative error over every report counted (0 without any).
  double MeanRelativeError() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct RankReport {
    double step_seconds = 0;
    std::optional<double> relative_error;
    /// Counted in the refit sums of `refit_epoch`: the micro-batches at SP
    /// 1 ([0]) and at SP >= 2 ([1]).
    std::array<std::vector<RefitAccumulator::Observation>, 2>
        compute_observations_by_kind;
    std::vector<RefitAccumulator::Observation> communication_observations;
    /// {calls, bus bytes, measured seconds} of each micro-batch's
    /// all-to-alls, and whether its group spans nodes.
    std::vector<std::array<double, 3>> all_to_all_rows;
    /// Micro-batch refit rows and their measured compute seconds.
    std::vector<std::pair<MicroBatchRefit::Row, double>> fit_rows;
    bool inter_node = false;
    int64_t refit_epoch = -1;
    /// The report as recorded (only with `record_reports_`).
    v1::RankStepReport measured;
  };
  struct StepReports {
    std::map<int, RankReport> ranks;
    bool imbalance_reported = false;
    /// Ranks with a group in the step's plan.
    int ranks_with_group = 0;
    /// A report came since the step's reports were last asked to be
    /// recorded.
    bool unrecorded = false;
  };
  static v1::StepReportsRecord RecordOf(int64_t step,
                                        const StepReports& reports);

  const int world_size_;
  const bool online_refit_;
  const bool record_reports_;
  const bool micro_batch_refit_enabled_;
  const int warmup_steps_;
  mutable absl::Mutex mu_;
  // The first step reported (warm-up steps are counted from it).
  std::optional<int64_t> first_step_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, StepReports> steps_ ABSL_GUARDED_BY(mu_);
  double relative_error_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t relative_error_count_ ABSL_GUARDED_BY(mu_) = 0;
  /// Sums for steps planned with versions >= `refit_epoch_`; reset when the
  /// parameters' refit epoch moves on (a new profile fit).
  int64_t refit_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  /// The compute refit's sums for micro-batches at SP 1 ([0]) and at
  /// SP >= 2 ([1]); their merge is the pooled factor's.
  std::array<RefitAccumulator, 2> refit_by_kind_ ABSL_GUARDED_BY(mu_);
  RefitAccumulator communication_refit_ ABSL_GUARDED_BY(mu_);
  AllToAllRefitAccumulator all_to_all_intra_ ABSL_GUARDED_BY(mu_);
  AllToAllRefitAccumulator all_to_all_inter_ ABSL_GUARDED_BY(mu_);
  MicroBatchRefit micro_batch_refit_ ABSL_GUARDED_BY(mu_);
  /// How many times each row is counted in `micro_batch_refit_`: the ranks
  /// of a group report the same micro-batches, so the fit is given only
  /// with MicroBatchRefit::kMinRows distinct rows.
  std::map<MicroBatchRefit::Row, int> fit_row_counts_ ABSL_GUARDED_BY(mu_);
  void RemoveFitRow(const MicroBatchRefit::Row& row, double seconds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Record's steps.
  /// Notes `step` as the first step reported if none earlier was, and says
  /// whether it is one of the warm-up steps.
  bool NoteStepAndIsWarmUp(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  /// Fills `report`'s refit observations of epoch `refit_epoch` from the
  /// micro-batches of `request`, predicted at the fitted parameters (the
  /// plan's predictions over its version's corrections).
  static void ObserveMicroBatches(const v1::ReportStepStatsRequest& request,
                                  const GroupSummary& group,
                                  double plan_correction,
                                  double plan_communication_correction,
                                  double plan_sp_compute_correction,
                                  int64_t refit_epoch, RankReport& report);
  /// Empties the refit sums when the parameters' refit epoch moved on to
  /// `refit_epoch`.
  void StartOverOnNewFit(int64_t refit_epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Takes a rank's earlier report of a step back out of the error and
  /// refit sums.
  void TakeOutOfSums(const RankReport& old) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Adds `report` to the error and refit sums; its fit rows are cut to
  /// those the micro-batch refit counted.
  void CountInSums(RankReport& report) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Marks `step_reports` (of `step`, planned as `plan`) as unrecorded;
  /// once every rank with a group in the plan reported, returns the records
  /// of it and of the earlier steps unrecorded, marking them recorded.
  std::vector<v1::StepReportsRecord> ReportsToRecord(int64_t step,
                                                     const PlannedStep& plan,
                                                     StepReports& step_reports)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// (slowest - mean) / slowest step time of a step every rank reported.
  double Imbalance(const StepReports& reports) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Fills `outcome`'s refit fields from the sums of the current refit
  /// epoch; `fitted` is the profile fit's compute parameters.
  void OfferRefit(const ComputeParams& fitted, Outcome& outcome) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// The micro-batch fit replaces the single factor only where that factor
  /// leaves a root-mean-square relative error above this over the window's
  /// rows...
  static constexpr double kMinFactorErrorForFit = 0.05;
  /// ...and the fit's is at most this share of it: measurements the
  /// current model already explains make no new version.
  static constexpr double kFitErrorShare = 0.8;
  /// Whether `fit` explains the window's micro-batch rows clearly better
  /// than scaling the profile fit (`fitted`) by `factor`.
  bool FitBeatsFactor(const MicroBatchRefit::Coefficients& fit, double factor,
                      const ComputeParams& fitted) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_STEP_STATS_TRACKER_H_
