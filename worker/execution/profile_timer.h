// The median timer every profile measurement uses (profiler.h).

#ifndef DCP_WORKER_EXECUTION_PROFILE_TIMER_H_
#define DCP_WORKER_EXECUTION_PROFILE_TIMER_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "torch/torch.h"
#include "worker/execution/device_sync.h"

namespace dcp {

/// Times one measurement: `warmup` untimed runs, then `repeats` runs each
/// timed by two reads of `clock` (after synchronising `device`); `prepare`
/// runs (untimed) before every run. Thread-compatible; `clock` must outlive
/// it.
class ProfileTimer {
 public:
  ProfileTimer(int warmup, int repeats, const torch::Device& device,
               const Clock& clock)
      : warmup_(warmup), repeats_(repeats), device_(device), clock_(clock) {}

  /// The median seconds of the timed runs; the first error of `prepare` or
  /// `run`; INTERNAL, naming `what`, when the median is not positive (the
  /// clock did not advance).
  absl::StatusOr<double> MedianSeconds(
      absl::string_view what, const std::function<absl::Status()>& prepare,
      const std::function<absl::Status()>& run) const;
  /// The seconds of each timed run, in order; errors as MedianSeconds.
  absl::StatusOr<std::vector<double>> TimedSeconds(
      absl::string_view what, const std::function<absl::Status()>& prepare,
      const std::function<absl::Status()>& run) const;

  int warmup() const { return warmup_; }
  int repeats() const { return repeats_; }

 private:
  int warmup_;
  int repeats_;
  torch::Device device_;
  const Clock& clock_;
};

/// A `prepare` that does nothing.
inline absl::Status NoPreparation() { return absl::OkStatus(); }

/// The median and the mean of `values` (non-empty).
double MedianOf(std::vector<double> values);
double MeanOf(const std::vector<double>& values);

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_PROFILE_TIMER_H_
