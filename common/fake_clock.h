#ifndef DCP_COMMON_FAKE_CLOCK_H_
#define DCP_COMMON_FAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace dcp {

/// A clock that moves only when told to: tests call Advance() to make time
/// pass. Thread-safe (Now() and Advance() may race; each is atomic).
class FakeClock final : public Clock {
 public:
  /// Starts at `start` (the Unix epoch by default).
  explicit FakeClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mutex_);
    return now_;
  }

  /// Moves the time forward by `duration` (backward if it is negative).
  void Advance(absl::Duration duration) {
    absl::MutexLock lock(&mutex_);
    now_ += duration;
  }

  /// Jumps to `time`.
  void SetTime(absl::Time time) {
    absl::MutexLock lock(&mutex_);
    now_ = time;
  }

 private:
  mutable absl::Mutex mutex_;
  absl::Time now_ ABSL_GUARDED_BY(mutex_);
};

/// A clock that moves forward by `step` at every reading, so that any two
/// readings differ and code that times itself sees positive durations
/// without a test advancing time by hand. Thread-safe.
class SteppingClock final : public Clock {
 public:
  explicit SteppingClock(absl::Duration step = absl::Milliseconds(1),
                         absl::Time start = absl::UnixEpoch())
      : step_(step), now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mutex_);
    now_ += step_;
    return now_;
  }

 private:
  const absl::Duration step_;
  mutable absl::Mutex mutex_;
  mutable absl::Time now_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace dcp

#endif  // DCP_COMMON_FAKE_CLOCK_H_
