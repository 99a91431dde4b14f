#include "planner/service/byte_quantity.h"

#include <cstdint>
#include <limits>

#include "absl/numeric/int128.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace dcp {

absl::StatusOr<int64_t> ParseByteQuantity(absl::string_view flag,
                                          absl::string_view text) {
  struct Suffix {
    absl::string_view name;
    int64_t multiplier;
  };
  static constexpr Suffix kSuffixes[] = {
      {"Ki", int64_t{1} << 10},
      {"Mi", int64_t{1} << 20},
      {"Gi", int64_t{1} << 30},
      {"Ti", int64_t{1} << 40},
      {"k", 1000},
      {"K", 1000},
      {"M", 1000 * 1000},
      {"G", 1000 * 1000 * 1000},
      {"T", int64_t{1000} * 1000 * 1000 * 1000}};
  const absl::Status invalid = absl::InvalidArgumentError(absl::StrCat(
      "--", flag, "=", text,
      " is not a memory size; give bytes or a Kubernetes quantity such as "
      "768Mi, 1.5Gi or 800M (0: no bound)"));
  absl::string_view number = text;
  int64_t multiplier = 1;
  for (const Suffix& suffix : kSuffixes) {
    if (absl::ConsumeSuffix(&number, suffix.name)) {
      multiplier = suffix.multiplier;
      break;
    }
  }
  // Exact arithmetic: whole * multiplier + fraction digits * multiplier /
  // 10^digits, in 128 bits (at most 19 fraction digits count).
  absl::uint128 whole = 0;
  absl::uint128 fraction = 0;
  absl::uint128 fraction_scale = 1;
  bool seen_point = false;
  int digits = 0;
  for (const char c : number) {
    if (c == '.' && !seen_point) {
      seen_point = true;
      continue;
    }
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return invalid;
    ++digits;
    const int digit = c - '0';
    if (!seen_point) {
      whole = whole * 10 + digit;
      if (whole > std::numeric_limits<int64_t>::max()) return invalid;
    } else if (fraction_scale < absl::uint128(10'000'000'000'000'000'000u)) {
      fraction = fraction * 10 + digit;
      fraction_scale *= 10;
    }
  }
  if (digits == 0) return invalid;
  const absl::uint128 bytes =
      whole * multiplier + fraction * multiplier / fraction_scale;
  if (bytes > std::numeric_limits<int64_t>::max()) return invalid;
  return static_cast<int64_t>(bytes);
}

}  // namespace dcp
