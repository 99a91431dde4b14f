#include "planner/service/step_stats_tracker.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

/// The group of the reporting rank in `plan`: FAILED_PRECONDITION if the
/// rank has none, INVALID_ARGUMENT if a micro-batch reported is not one of
/// the group's.
absl::StatusOr<const GroupSummary*> ReportedGroup(
    const v1::ReportStepStatsRequest& request, const PlannedStep& plan) {
  const int64_t step = request.step();
  const int rank = request.rank();
  const int group_index = plan.group_of_rank[rank];
  if (group_index < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, " has no group in step ", step, "'s plan"));
  }
  const GroupSummary& group = plan.groups[group_index];
  const int count = static_cast<int>(group.micro_batch_compute_seconds.size());
  for (int i = 0; i < request.micro_batches_size(); ++i) {
    const int index = request.micro_batches(i).micro_batch_index();
    if (index >= count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "micro_batches[", i, "].micro_batch_index = ", index, " but rank ",
          rank, "'s group runs ", count, " micro-batches in step ", step,
          " (indices 0..", count - 1, ")"));
    }
  }
  return &group;
}

/// |measured - predicted| / measured of a step measured at `measured`
/// seconds against its prediction `predicted` (> 0); none when their ratio
/// says the clock is broken.
std::optional<double> CountedRelativeError(double measured, double predicted) {
  // A step measured at under a hundredth of its prediction (1e-300 s,
  // say) or at over a million times it is a broken clock, not an error of
  // the model: counted, its error (up to 1e300) would swamp the mean of
  // every other report, and taking it back when the rank reports again
  // would cancel theirs away. Far above the prediction but within that
  // bound (an unprofiled model on CPU workers, 1,000x) it counts: the
  // error is then below 1.
  constexpr double kLeastCountedRatio = 1e-2;
  constexpr double kMostCountedRatio = 1e6;
  const double measured_over_predicted = measured / predicted;
  if (measured_over_predicted >= kLeastCountedRatio &&
      measured_over_predicted <= kMostCountedRatio) {
    return std::abs(measured - predicted) / measured;
  }
  return std::nullopt;
}

/// The report as the step reports records keep it.
v1::RankStepReport MeasuredOf(const v1::ReportStepStatsRequest& request) {
  v1::RankStepReport measured;
  measured.set_rank(request.rank());
  measured.set_step_seconds(request.step_seconds());
  for (const v1::MicroBatchStats& stats : request.micro_batches()) {
    v1::MeasuredMicroBatch* micro = measured.add_micro_batches();
    micro->set_micro_batch_index(stats.micro_batch_index());
    micro->set_compute_seconds(stats.compute_seconds());
    micro->set_communication_seconds(stats.communication_seconds());
    micro->set_idle_seconds(stats.idle_seconds());
  }
  return measured;
}

}  // namespace

absl::StatusOr<StepStatsTracker::Outcome> StepStatsTracker::Record(
    const v1::ReportStepStatsRequest& request, const PlannedStep& plan,
    double plan_correction, const CostParamsSnapshot& params,
    double plan_communication_correction, double plan_sp_compute_correction) {
  DCP_ASSIGN_OR_RETURN(const GroupSummary* group, ReportedGroup(request, plan));
  const int64_t step = request.step();
  const int rank = request.rank();
  const double measured = request.step_seconds();

  // The rank's numbers, outside the main lock (the warm-up check takes it
  // briefly).
  Outcome outcome;
  RankReport report;
  report.step_seconds = measured;
  if (group->predicted_seconds > 0) {
    outcome.measured_over_predicted = measured / group->predicted_seconds;
    report.relative_error =
        CountedRelativeError(measured, group->predicted_seconds);
  }
  // Online refit observations (predicted at the fitted parameters); none
  // from the warm-up steps.
  const bool warm_up = NoteStepAndIsWarmUp(step);
  if (!warm_up && plan.params_version >= params.refit_epoch) {
    ObserveMicroBatches(request, *group, plan_correction,
                        plan_communication_correction,
                        plan_sp_compute_correction, params.refit_epoch, report);
  }
  if (record_reports_) report.measured = MeasuredOf(request);

  // The rank's report replaces any earlier one of the step in the sums.
  absl::MutexLock lock(&mu_);
  StartOverOnNewFit(params.refit_epoch);
  StepReports& step_reports = steps_[step];
  auto [slot, first_report] = step_reports.ranks.try_emplace(rank);
  if (!first_report) TakeOutOfSums(slot->second);
  CountInSums(report);
  outcome.relative_error = report.relative_error;
  slot->second = std::move(report);

  // Closing the step once its ranks reported.
  if (record_reports_) {
    outcome.reports_to_record = ReportsToRecord(step, plan, step_reports);
  }
  if (!step_reports.imbalance_reported &&
      static_cast<int>(step_reports.ranks.size()) == world_size_) {
    step_reports.imbalance_reported = true;
    outcome.imbalance = Imbalance(step_reports);
    // Refit once per completed step, so that one step's reports make at
    // most one new version.
    if (online_refit_) OfferRefit(params.fitted_params.compute, outcome);
  }
  return outcome;
}

bool StepStatsTracker::NoteStepAndIsWarmUp(int64_t step) {
  absl::MutexLock lock(&mu_);
  if (!first_step_.has_value() || step < *first_step_) first_step_ = step;
  return step < *first_step_ + warmup_steps_;
}

void StepStatsTracker::ObserveMicroBatches(
    const v1::ReportStepStatsRequest& request, const GroupSummary& group,
    double plan_correction, double plan_communication_correction,
    double plan_sp_compute_correction, int64_t refit_epoch,
    RankReport& report) {
  report.refit_epoch = refit_epoch;
  report.inter_node = group.inter_node;
  for (const v1::MicroBatchStats& stats : request.micro_batches()) {
    const size_t index = static_cast<size_t>(stats.micro_batch_index());
    const bool sp = index < group.micro_batch_sp_sizes.size() &&
                    group.micro_batch_sp_sizes[index] > 1;
    const double predicted =
        group.micro_batch_compute_seconds[index] / plan_correction /
        (sp && plan_sp_compute_correction > 0 ? plan_sp_compute_correction
                                              : 1.0);
    const double ratio = predicted / stats.compute_seconds();
    if (predicted > 0 && stats.compute_seconds() > 0 &&
        RefitAccumulator::Accepts(ratio)) {
      report.compute_observations_by_kind[sp ? 1 : 0].push_back(
          {predicted, stats.compute_seconds()});
    }
    if (index < group.micro_batch_fit_rows.size() &&
        stats.compute_seconds() > 0 && std::isfinite(stats.compute_seconds())) {
      report.fit_rows.emplace_back(group.micro_batch_fit_rows[index],
                                   stats.compute_seconds());
    }
    if (index < group.micro_batch_all_to_all_calls.size() &&
        index < group.micro_batch_all_to_all_bus_bytes.size() &&
        group.micro_batch_all_to_all_calls[index] > 0 &&
        stats.communication_seconds() > 0 &&
        std::isfinite(stats.communication_seconds())) {
      report.all_to_all_rows.push_back(
          {group.micro_batch_all_to_all_calls[index],
           group.micro_batch_all_to_all_bus_bytes[index],
           stats.communication_seconds()});
    }
    const std::vector<double>& communication =
        group.micro_batch_communication_seconds;
    if (static_cast<size_t>(stats.micro_batch_index()) < communication.size()) {
      const double predicted_communication =
          communication[stats.micro_batch_index()] /
          plan_communication_correction;
      const double communication_ratio =
          predicted_communication / stats.communication_seconds();
      if (predicted_communication > 0 && stats.communication_seconds() > 0 &&
          RefitAccumulator::Accepts(communication_ratio)) {
        report.communication_observations.push_back(
            {predicted_communication, stats.communication_seconds()});
      }
    }
  }
}

void StepStatsTracker::StartOverOnNewFit(int64_t refit_epoch) {
  if (refit_epoch == refit_epoch_) return;
  // A new fit is a new baseline: online corrections start over from it.
  refit_epoch_ = refit_epoch;
  refit_by_kind_ = {};
  communication_refit_ = RefitAccumulator();
  all_to_all_intra_ = AllToAllRefitAccumulator();
  all_to_all_inter_ = AllToAllRefitAccumulator();
  micro_batch_refit_ = MicroBatchRefit();
  fit_row_counts_.clear();
}

void StepStatsTracker::TakeOutOfSums(const RankReport& old) {
  if (old.relative_error.has_value()) {
    relative_error_sum_ -= *old.relative_error;
    --relative_error_count_;
  }
  if (old.refit_epoch != refit_epoch_) return;
  for (int kind = 0; kind < 2; ++kind) {
    refit_by_kind_[kind].Remove(old.compute_observations_by_kind[kind]);
  }
  communication_refit_.Remove(old.communication_observations);
  for (const auto& [calls, bytes, seconds] : old.all_to_all_rows) {
    (old.inter_node ? all_to_all_inter_ : all_to_all_intra_)
        .Remove(calls, bytes, seconds);
  }
  for (const auto& [row, seconds] : old.fit_rows) {
    RemoveFitRow(row, seconds);
  }
}

void StepStatsTracker::CountInSums(RankReport& report) {
  if (report.relative_error.has_value()) {
    relative_error_sum_ += *report.relative_error;
    ++relative_error_count_;
  }
  if (report.refit_epoch != refit_epoch_) return;
  for (int kind = 0; kind < 2; ++kind) {
    refit_by_kind_[kind].Add(report.compute_observations_by_kind[kind]);
  }
  communication_refit_.Add(report.communication_observations);
  for (const auto& [calls, bytes, seconds] : report.all_to_all_rows) {
    (report.inter_node ? all_to_all_inter_ : all_to_all_intra_)
        .Add(calls, bytes, seconds);
  }
  // Only the rows counted, so that Remove takes back exactly those.
  std::vector<std::pair<MicroBatchRefit::Row, double>> counted;
  for (const auto& [row, seconds] : report.fit_rows) {
    if (micro_batch_refit_.Add(row, seconds)) {
      ++fit_row_counts_[row];
      counted.emplace_back(row, seconds);
    }
  }
  report.fit_rows = std::move(counted);
}

std::vector<v1::StepReportsRecord> StepStatsTracker::ReportsToRecord(
    int64_t step, const PlannedStep& plan, StepReports& step_reports) {
  std::vector<v1::StepReportsRecord> records;
  if (step_reports.ranks_with_group == 0) {
    step_reports.ranks_with_group = static_cast<int>(
        std::count_if(plan.group_of_rank.begin(), plan.group_of_rank.end(),
                      [](int g) { return g >= 0; }));
  }
  step_reports.unrecorded = true;
  if (static_cast<int>(step_reports.ranks.size()) >=
      step_reports.ranks_with_group) {
    for (auto& [earlier, reports] : steps_) {
      if (earlier > step) break;
      if (!reports.unrecorded) continue;
      records.push_back(RecordOf(earlier, reports));
      reports.unrecorded = false;
    }
  }
  return records;
}

double StepStatsTracker::Imbalance(const StepReports& reports) const {
  double most = 0;
  double sum = 0;
  for (const auto& [r, rank_report] : reports.ranks) {
    most = std::max(most, rank_report.step_seconds);
    sum += rank_report.step_seconds;
  }
  return (most - sum / world_size_) / most;
}

void StepStatsTracker::OfferRefit(const ComputeParams& fitted,
                                  Outcome& outcome) const {
  RefitAccumulator pooled = refit_by_kind_[0];
  pooled.Merge(refit_by_kind_[1]);
  outcome.refit_factor = pooled.Factor();
  const std::optional<double> single = refit_by_kind_[0].Factor();
  const std::optional<double> sp = refit_by_kind_[1].Factor();
  if (single.has_value() && sp.has_value()) {
    outcome.refit_factor = single;
    outcome.sp_compute_scale = *sp / *single;
  }
  outcome.communication_refit_factor = communication_refit_.Factor();
  outcome.all_to_all_intra = all_to_all_intra_.Solve();
  outcome.all_to_all_inter = all_to_all_inter_.Solve();
  outcome.refit_epoch = refit_epoch_;
  outcome.refit_observations = pooled.count();
  if (micro_batch_refit_enabled_ &&
      static_cast<int>(fit_row_counts_.size()) >= MicroBatchRefit::kMinRows &&
      outcome.refit_factor.has_value()) {
    std::optional<MicroBatchRefit::Coefficients> fit =
        micro_batch_refit_.Solve();
    if (fit.has_value() &&
        FitBeatsFactor(*fit, *outcome.refit_factor, fitted)) {
      outcome.micro_batch_fit = fit;
    }
  }
  outcome.micro_batch_fit_rows = micro_batch_refit_.count();
}

bool StepStatsTracker::FitBeatsFactor(const MicroBatchRefit::Coefficients& fit,
                                      double factor,
                                      const ComputeParams& fitted) const {
  // The single factor's model of a row: the profile fit's, scaled.
  const MicroBatchRefit::Coefficients scaled = {
      factor, factor * fitted.micro_batch_fixed_seconds,
      factor * fitted.layer_fixed_seconds,
      factor * fitted.sequence_layer_fixed_seconds};
  double fit_error = 0;
  double factor_error = 0;
  for (const auto& [step, reports] : steps_) {
    for (const auto& [rank, report] : reports.ranks) {
      if (report.refit_epoch != refit_epoch_) continue;
      for (const auto& [row, seconds] : report.fit_rows) {
        const double e = 1 - MicroBatchRefit::Predict(row, fit) / seconds;
        const double f = 1 - MicroBatchRefit::Predict(row, scaled) / seconds;
        fit_error += e * e;
        factor_error += f * f;
      }
    }
  }
  const double n = static_cast<double>(micro_batch_refit_.count());
  if (n <= 0) return false;
  return std::sqrt(factor_error / n) > kMinFactorErrorForFit &&
         fit_error < kFitErrorShare * kFitErrorShare * factor_error;
}

void StepStatsTracker::RemoveFitRow(const MicroBatchRefit::Row& row,
                                    double seconds) {
  micro_batch_refit_.Remove(row, seconds);
  auto it = fit_row_counts_.find(row);
  if (it != fit_row_counts_.end() && --it->second <= 0) {
    fit_row_counts_.erase(it);
  }
}

v1::StepReportsRecord StepStatsTracker::RecordOf(int64_t step,
                                                 const StepReports& reports) {
  v1::StepReportsRecord record;
  record.set_step(step);
  for (const auto& [rank, report] : reports.ranks) {
    *record.add_ranks() = report.measured;
  }
  return record;
}

void StepStatsTracker::Forget(const std::vector<int64_t>& steps) {
  absl::MutexLock lock(&mu_);
  for (int64_t step : steps) {
    auto it = steps_.find(step);
    if (it == steps_.end()) continue;
    // The micro-batch refit fits the window's steps only (the single
    // factor's sums keep every step of the epoch).
    for (const auto& [rank, report] : it->second.ranks) {
      if (report.refit_epoch != refit_epoch_) continue;
      for (const auto& [row, seconds] : report.fit_rows) {
        RemoveFitRow(row, seconds);
      }
    }
    steps_.erase(it);
  }
}

double StepStatsTracker::MeanRelativeError() const {
  absl::MutexLock lock(&mu_);
  return relative_error_count_ > 0 ? relative_error_sum_ / relative_error_count_
                                   : 0;
}

}  // namespace dcp
