#include "common/byte_format.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace dcp {

std::string FormatBytes(double bytes) {
  constexpr double kKiB = 1024.0;
  constexpr double kMiB = 1024.0 * kKiB;
  constexpr double kGiB = 1024.0 * kMiB;
  if (std::isnan(bytes)) return "nan B";
  if (std::isinf(bytes)) return bytes > 0 ? "inf B" : "-inf B";
  const double magnitude = std::fabs(bytes);
  // Each threshold sits half a printed digit below the unit, so that no
  // count prints as 1024 of the unit below.
  if (magnitude < kKiB - 0.5) return absl::StrFormat("%.0f B", bytes);
  if (magnitude < kMiB - 0.05 * kKiB) {
    return absl::StrFormat("%.1f KiB", bytes / kKiB);
  }
  if (magnitude < kGiB - 0.05 * kMiB) {
    return absl::StrFormat("%.1f MiB", bytes / kMiB);
  }
  return absl::StrFormat("%.1f GiB", bytes / kGiB);
}

}  // namespace dcp
