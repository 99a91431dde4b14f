#ifndef DCP_COST_MODEL_SATURATING_MATH_H_
#define DCP_COST_MODEL_SATURATING_MATH_H_

// Integer arithmetic that cannot wrap: the cost model and the planner count
// tokens, bytes and parameters in int64, and an absurd input (a model or a
// batch far beyond anything trainable) must give a number that is too large,
// never a small or negative one. Pure functions; thread-safe.

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

namespace dcp {

/// a + b, or nullopt when it does not fit in int64.
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

/// a * b, or nullopt when it does not fit in int64.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

/// a + b, clamped to the int64 range.
inline int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? std::numeric_limits<int64_t>::max()
               : std::numeric_limits<int64_t>::min();
}

/// a * b, clamped to the int64 range.
inline int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (!__builtin_mul_overflow(a, b, &product)) return product;
  return (a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min()
                            : std::numeric_limits<int64_t>::max();
}

/// ceil(numerator / denominator) for numerator >= 0 and denominator >= 1,
/// without the (numerator + denominator - 1) that wraps near the int64
/// maximum. Powers of two (the usual SP sizes) shift instead of dividing:
/// this runs once per sequence in every packing and pricing.
inline int64_t CeilDivide(int64_t numerator, int denominator) {
  if ((denominator & (denominator - 1)) == 0) {
    const int shift = __builtin_ctz(static_cast<unsigned>(denominator));
    return (numerator >> shift) +
           ((numerator & (int64_t{denominator} - 1)) != 0);
  }
  return numerator / denominator + (numerator % denominator != 0);
}

/// `value` rounded toward zero and clamped to the int64 range (a plain cast
/// of a double outside it is undefined); NaN gives 0.
inline int64_t SaturatingToInt64(double value) {
  if (std::isnan(value)) return 0;
  // 2^63 is exact in a double; every double below it converts exactly.
  constexpr double kTwoTo63 = 9223372036854775808.0;
  if (value >= kTwoTo63) return std::numeric_limits<int64_t>::max();
  if (value <= -kTwoTo63) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(value);
}

/// `value` rounded toward zero and clamped to the int range; NaN gives 0.
inline int SaturatingToInt(double value) {
  if (std::isnan(value)) return 0;
  if (value >= static_cast<double>(std::numeric_limits<int>::max())) {
    return std::numeric_limits<int>::max();
  }
  if (value <= static_cast<double>(std::numeric_limits<int>::min())) {
    return std::numeric_limits<int>::min();
  }
  return static_cast<int>(value);
}

}  // namespace dcp

#endif  // DCP_COST_MODEL_SATURATING_MATH_H_
