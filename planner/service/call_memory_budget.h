#ifndef DCP_PLANNER_SERVICE_CALL_MEMORY_BUDGET_H_
#define DCP_PLANNER_SERVICE_CALL_MEMORY_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dcp {

/// The memory that calls in flight may hold while their requests are parsed
/// and handled (a share of dcp_planner --memory-budget): each large call
/// reserves what it will take before it parses, and gives it back when it
/// is done. A call that cannot fit even alone is refused at once; one that
/// does not fit now waits for others to finish, up to a deadline.
/// Thread-safe.
class CallMemoryBudget {
 public:
  /// `budget_bytes` 0: no bound. `source` says where the budget comes from,
  /// for messages ("a quarter of dcp_planner --memory-budget=768.0 MiB").
  CallMemoryBudget(int64_t budget_bytes, std::string source);

  /// Bytes held until destroyed (or moved from).
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept;
    Reservation& operator=(Reservation&& other) noexcept;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation();

    int64_t bytes() const { return bytes_; }

   private:
    friend class CallMemoryBudget;
    Reservation(CallMemoryBudget* budget, int64_t bytes)
        : budget_(budget), bytes_(bytes) {}
    void Release();

    CallMemoryBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  /// Reserves `bytes` for a call described by `what` ("SubmitBatches of
  /// 1048576 samples"), waiting until `deadline` for others to give theirs
  /// back (a past deadline: no wait). RESOURCE_EXHAUSTED when `bytes` is
  /// over the whole budget, or does not fit by the deadline, naming the
  /// budget and the fix.
  absl::StatusOr<Reservation> Reserve(int64_t bytes, absl::string_view what,
                                      absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

  int64_t reserved_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t budget_bytes() const { return budget_bytes_; }

 private:
  void Give(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  const int64_t budget_bytes_;
  const std::string source_;
  mutable absl::Mutex mu_;
  int64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_CALL_MEMORY_BUDGET_H_
