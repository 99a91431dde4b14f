#include "common/percentile.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace dcp {

double Percentile(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  // !(fraction > 0) also catches NaN.
  const double clamped = !(fraction > 0) ? 0 : std::min(fraction, 1.0);
  const size_t rank = static_cast<size_t>(
      std::ceil(clamped * static_cast<double>(values.size())));
  const size_t index = std::min(values.size(), std::max<size_t>(rank, 1)) - 1;
  std::nth_element(values.begin(), values.begin() + index, values.end());
  return values[index];
}

}  // namespace dcp
