#include "planner/service/call_memory_budget.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/byte_format.h"

namespace dcp {

CallMemoryBudget::CallMemoryBudget(int64_t budget_bytes, std::string source)
    : budget_bytes_(budget_bytes), source_(std::move(source)) {}

CallMemoryBudget::Reservation::Reservation(Reservation&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

CallMemoryBudget::Reservation& CallMemoryBudget::Reservation::operator=(
    Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

CallMemoryBudget::Reservation::~Reservation() { Release(); }

void CallMemoryBudget::Reservation::Release() {
  if (budget_ != nullptr) budget_->Give(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<CallMemoryBudget::Reservation> CallMemoryBudget::Reserve(
    int64_t bytes, absl::string_view what, absl::Time deadline) {
  if (budget_bytes_ <= 0) return Reservation();
  if (bytes > budget_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " would take about ", FormatBytes(bytes),
        " to parse and handle, more than the ", FormatBytes(budget_bytes_),
        " that calls in flight may hold (", source_,
        "); send fewer samples per call, or raise --memory-budget"));
  }
  absl::MutexLock lock(&mu_);
  const auto fits = [this, bytes]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return reserved_ + bytes <= budget_bytes_;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&fits), deadline)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " needs about ", FormatBytes(bytes),
        " while calls in flight hold ", FormatBytes(reserved_), " of their ",
        FormatBytes(budget_bytes_), " (", source_,
        "); retry later, send fewer samples per call, or raise "
        "--memory-budget"));
  }
  reserved_ += bytes;
  return Reservation(this, bytes);
}

int64_t CallMemoryBudget::reserved_bytes() const {
  absl::MutexLock lock(&mu_);
  return reserved_;
}

void CallMemoryBudget::Give(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  reserved_ -= bytes;
}

}  // namespace dcp
