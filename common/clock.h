#ifndef DCP_COMMON_CLOCK_H_
#define DCP_COMMON_CLOCK_H_

#include <chrono>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dcp {

/// A source of the current time, injected wherever code measures or waits on
/// time so that tests can control it (see FakeClock). Implementations must be
/// thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  /// The current wall-clock time: for timestamps shown to people or stored.
  /// It may jump (NTP, an operator setting the clock), so never measure
  /// intervals with it; use MonotonicNow().
  virtual absl::Time Now() const = 0;
  /// A reading of a clock that never jumps and never goes back, for timeouts
  /// and liveness: only differences between two readings mean anything (the
  /// value is not a date). The default is Now(), right only for clocks whose
  /// Now() never jumps; a clock whose wall time can jump overrides it.
  virtual absl::Time MonotonicNow() const { return Now(); }
};

/// The system's wall clock, and its steady clock for MonotonicNow().
/// Stateless; thread-safe.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  /// std::chrono::steady_clock, as a Time after the Unix epoch.
  absl::Time MonotonicNow() const override {
    return absl::UnixEpoch() +
           absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
  }

  /// A process-wide instance, for callers that need a `const Clock&` that
  /// outlives them.
  static const RealClock& Get() {
    static const RealClock* const clock = new RealClock();
    return *clock;
  }
};

}  // namespace dcp

#endif  // DCP_COMMON_CLOCK_H_
