#ifndef DCP_COMMON_CLOCK_H_
#define DCP_COMMON_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dcp {

/// A source of the current time, injected wherever code measures or waits on
/// time so that tests can control it (see FakeClock). Implementations must be
/// thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  /// The current time.
  virtual absl::Time Now() const = 0;
};

/// The system's wall clock. Stateless; thread-safe.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }

  /// A process-wide instance, for callers that need a `const Clock&` that
  /// outlives them.
  static const RealClock& Get() {
    static const RealClock* const clock = new RealClock();
    return *clock;
  }
};

}  // namespace dcp

#endif  // DCP_COMMON_CLOCK_H_
