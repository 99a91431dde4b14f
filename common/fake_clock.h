#ifndef DCP_COMMON_FAKE_CLOCK_H_
#define DCP_COMMON_FAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace dcp {

/// A clock that moves only when told to: tests call Advance() to make time
/// pass, and JumpWallClock() or SetTime() to move the wall clock alone (as
/// NTP or an operator would) while the monotonic clock stays put.
/// Thread-safe (readings and moves may race; each is atomic).
class FakeClock final : public Clock {
 public:
  /// Both clocks start at `start` (the Unix epoch by default).
  explicit FakeClock(absl::Time start = absl::UnixEpoch())
      : now_(start), monotonic_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mutex_);
    return now_;
  }

  absl::Time MonotonicNow() const override {
    absl::MutexLock lock(&mutex_);
    return monotonic_;
  }

  /// Lets `duration` pass: both clocks move forward by it (a negative
  /// `duration` moves the wall clock back and leaves the monotonic one).
  void Advance(absl::Duration duration) {
    absl::MutexLock lock(&mutex_);
    now_ += duration;
    if (duration > absl::ZeroDuration()) monotonic_ += duration;
  }

  /// Moves the wall clock alone by `jump` (either way); no time passes.
  void JumpWallClock(absl::Duration jump) {
    absl::MutexLock lock(&mutex_);
    now_ += jump;
  }

  /// Sets the wall clock alone to `time`; no time passes.
  void SetTime(absl::Time time) {
    absl::MutexLock lock(&mutex_);
    now_ = time;
  }

 private:
  mutable absl::Mutex mutex_;
  absl::Time now_ ABSL_GUARDED_BY(mutex_);
  absl::Time monotonic_ ABSL_GUARDED_BY(mutex_);
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
