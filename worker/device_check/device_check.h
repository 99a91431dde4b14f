// The device check: on one device (an H200, or the CPU with tiny sizes), it
// profiles the operations the workers run (GEMMs, the fused attention core,
// the collectives at world size 1, activation memory), fits the cost model
// to that profile with the planner's own fitter, then runs single
// micro-batches of each model through the PlanExecutor and compares what
// the fitted model predicts for them (PredictPlan) with what they took and
// held. scripts/device_check.sh packs and runs it.

#ifndef DCP_WORKER_DEVICE_CHECK_DEVICE_CHECK_H_
#define DCP_WORKER_DEVICE_CHECK_DEVICE_CHECK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/fitting.h"
#include "cost_model/memory_model.h"
#include "cost_model/model_spec.h"
#include "torch/torch.h"
#include "worker/communication/communicator.h"
#include "worker/device_check/error_table.h"
#include "worker/execution/profiler.h"

namespace dcp {

/// One model the check profiles, fits and runs. Plain value.
struct ModelCase {
  /// The model as it runs (a preset with fewer layers, say).
  ModelSpec spec;
  /// Tokens of the micro-batches (one sequence each), ascending.
  std::vector<int64_t> micro_batch_tokens;
  /// Recomputed layers of the micro-batches, each in [0, num_layers].
  std::vector<int> checkpointed_layers;
};

/// What RunDeviceCheck measures and how long it may take. Plain value.
struct DeviceCheckOptions {
  torch::Device device = torch::kCPU;
  /// bf16 (bf16 weights and activations, fp32 gradients and master
  /// weights with AdamW) or fp32; the profile runs in the same dtype.
  TrainingPrecision precision = TrainingPrecision::kFp32;
  std::vector<ModelCase> models;
  /// RunProfile's sizes. attention_lengths ascending: the longest ones are
  /// skipped when their estimated time (the previous one's, scaled by the
  /// squared length ratio) does not fit the profile budget.
  /// device, dtype and memory_static_bytes are set by the check.
  ProfileOptions profile;
  /// Buffer bytes of the world-size-1 collectives (all-reduce,
  /// reduce-scatter, all-gather, all-to-all), each timed as the median of
  /// profile.repeats runs; none (the phase is skipped) by default: a world
  /// of one rank needs no backend (SingleRankCommunicator).
  std::vector<int64_t> collective_bytes;
  /// Timed runs of each micro-batch (the median is reported, the largest
  /// peak); one untimed step per model comes first.
  int micro_batch_repeats = 3;
  /// The cluster the fit describes (one GPU: H200Cluster(1, 1)).
  ClusterSpec cluster = H200Cluster(1, 1);
  /// Time each phase may take, per model for the profile and the
  /// micro-batches. A phase past its budget skips what is left of it and
  /// says so in DeviceCheckReport::skipped.
  absl::Duration profile_budget = absl::Minutes(2);
  absl::Duration collectives_budget = absl::Seconds(20);
  absl::Duration micro_batch_budget = absl::Minutes(1.5);
  uint64_t seed = 0;
  /// Progress lines (required).
  std::function<void(const std::string&)> log;
  /// Called as each micro-batch row is measured, with every row so far (in
  /// the report's order), so that a run cut short (the device's time limit)
  /// keeps what it measured; may be empty.
  std::function<void(const std::vector<CheckRow>& rows)> on_row;
};

/// One world-size-1 collective timing. Plain value.
struct CollectiveTiming {
  /// "all_reduce", "reduce_scatter", "all_gather", "all_to_all".
  std::string op;
  int64_t bytes = 0;
  double seconds = 0;
};

/// What the check found. Plain value.
struct DeviceCheckReport {
  /// Per model: its name and the fit's report per sub-model.
  std::vector<std::pair<std::string, std::vector<ModelFitReport>>> fits;
  /// Every profile sample, per model name.
  std::vector<std::pair<std::string, std::vector<ProfileSample>>> samples;
  std::vector<CollectiveTiming> collectives;
  std::vector<CheckRow> rows;
  /// What a phase budget (or the device's memory) left out, one line each.
  std::vector<std::string> skipped;
};

/// Checks `options` (models valid for the executor, sizes positive and
/// ascending, budgets positive); INVALID_ARGUMENT naming the field.
absl::Status ValidateDeviceCheckOptions(const DeviceCheckOptions& options);

/// Runs the check on `communicator`'s world of one rank (gloo for the CPU,
/// nccl for a GPU). Errors: INVALID_ARGUMENT for bad options, or the failing
/// phase's error with the phase named. A micro-batch that runs out of device
/// memory is skipped (and listed), not an error.
absl::StatusOr<DeviceCheckReport> RunDeviceCheck(
    const DeviceCheckOptions& options, Communicator& communicator,
    const Clock& clock = RealClock::Get());

/// The report as text: the fit reports, the activation-memory samples, the
/// collectives, the skipped items, and FormatErrorTable of the rows.
std::string FormatDeviceCheckReport(const DeviceCheckReport& report);

}  // namespace dcp

#endif  // DCP_WORKER_DEVICE_CHECK_DEVICE_CHECK_H_
