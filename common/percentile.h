#ifndef DCP_COMMON_PERCENTILE_H_
#define DCP_COMMON_PERCENTILE_H_

#include <vector>

namespace dcp {

/// The nearest-rank percentile of `values`: the smallest value v such that at
/// least `fraction` of the values are <= v, i.e. the ceil(fraction * n)-th
/// smallest (the first for fraction 0). `fraction` is clamped to [0, 1];
/// empty `values` give 0. Takes `values` by value and sorts the copy, so
/// callers need not sort. Pure function.
double Percentile(std::vector<double> values, double fraction);

}  // namespace dcp

#endif  // DCP_COMMON_PERCENTILE_H_
