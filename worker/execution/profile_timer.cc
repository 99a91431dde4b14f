#include "worker/execution/profile_timer.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"

namespace dcp {

double MedianOf(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle]
                                : (values[middle - 1] + values[middle]) / 2;
}

double MeanOf(const std::vector<double>& values) {
  double sum = 0;
  for (double value : values) sum += value;
  return sum / static_cast<double>(values.size());
}

absl::StatusOr<double> ProfileTimer::MedianSeconds(
    absl::string_view what, const std::function<absl::Status()>& prepare,
    const std::function<absl::Status()>& run) const {
  absl::StatusOr<std::vector<double>> seconds =
      TimedSeconds(what, prepare, run);
  if (!seconds.ok()) return seconds.status();
  return MedianOf(*std::move(seconds));
}

absl::StatusOr<std::vector<double>> ProfileTimer::TimedSeconds(
    absl::string_view what, const std::function<absl::Status()>& prepare,
    const std::function<absl::Status()>& run) const {
  for (int i = 0; i < warmup_; ++i) {
    DCP_RETURN_IF_ERROR(prepare());
    DCP_RETURN_IF_ERROR(run());
  }
  SynchronizeDevice(device_);
  std::vector<double> seconds;
  seconds.reserve(repeats_);
  for (int i = 0; i < repeats_; ++i) {
    DCP_RETURN_IF_ERROR(prepare());
    SynchronizeDevice(device_);
    const absl::Time start = clock_.MonotonicNow();
    DCP_RETURN_IF_ERROR(run());
    SynchronizeDevice(device_);
    const absl::Time end = clock_.MonotonicNow();
    seconds.push_back(absl::ToDoubleSeconds(end - start));
  }
  const double median = MedianOf(seconds);
  if (!(median > 0)) {
    return absl::InternalError(absl::StrCat(
        "profiling ", what, ": the clock measured a median of ", median,
        " s over ", repeats_,
        " runs; the clock must advance over a measurement (use a finer "
        "clock or larger sizes)"));
  }
  return seconds;
}

}  // namespace dcp
