#include "cost_model/micro_batch_refit.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace dcp {
namespace {

// Solves the normal equations restricted to `kept` by Gaussian elimination
// with partial pivoting; nullopt when (near) singular.
std::optional<std::vector<double>> SolveKept(
    const std::array<std::array<double, MicroBatchRefit::kColumns>,
                     MicroBatchRefit::kColumns>& xx,
    const std::array<double, MicroBatchRefit::kColumns>& x1,
    const std::vector<int>& kept) {
  const int n = static_cast<int>(kept.size());
  std::vector<std::vector<double>> m(n, std::vector<double>(n + 1));
  double scale = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) m[i][j] = xx[kept[i]][kept[j]];
    m[i][n] = x1[kept[i]];
    scale = std::max(scale, std::abs(m[i][i]));
  }
  if (!(scale > 0)) return std::nullopt;
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    for (int r = col + 1; r < n; ++r) {
      if (std::abs(m[r][col]) > std::abs(m[pivot][col])) pivot = r;
    }
    if (std::abs(m[pivot][col]) <= 1e-12 * scale) return std::nullopt;
    std::swap(m[col], m[pivot]);
    for (int r = 0; r < n; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (int j = col; j <= n; ++j) m[r][j] -= f * m[col][j];
    }
  }
  std::vector<double> solution(n);
  for (int i = 0; i < n; ++i) {
    solution[i] = m[i][n] / m[i][i];
    if (!std::isfinite(solution[i])) return std::nullopt;
  }
  return solution;
}

}  // namespace

bool MicroBatchRefit::Add(const Row& row, double measured_seconds) {
  if (!(measured_seconds > 0) || !std::isfinite(measured_seconds)) {
    return false;
  }
  for (double v : row) {
    if (!(v >= 0) || !std::isfinite(v)) return false;
  }
  for (int i = 0; i < kColumns; ++i) {
    const double xi = row[i] / measured_seconds;
    x1_[i] += xi;
    for (int j = 0; j < kColumns; ++j) {
      xx_[i][j] += xi * row[j] / measured_seconds;
    }
  }
  ++count_;
  return true;
}

void MicroBatchRefit::Remove(const Row& row, double measured_seconds) {
  for (int i = 0; i < kColumns; ++i) {
    const double xi = row[i] / measured_seconds;
    x1_[i] -= xi;
    for (int j = 0; j < kColumns; ++j) {
      xx_[i][j] -= xi * row[j] / measured_seconds;
    }
  }
  --count_;
}

std::optional<MicroBatchRefit::Coefficients> MicroBatchRefit::Solve() const {
  if (count_ < kMinRows) return std::nullopt;
  std::vector<int> kept = {0, 1, 2, 3};
  while (true) {
    std::optional<std::vector<double>> solved = SolveKept(xx_, x1_, kept);
    if (!solved.has_value()) return std::nullopt;
    Coefficients c{};
    for (size_t k = 0; k < kept.size(); ++k) c[kept[k]] = (*solved)[k];
    int most_negative = -1;
    for (int column : kept) {
      if (column == 0) continue;
      if (c[column] < 0 &&
          (most_negative < 0 || c[column] < c[most_negative])) {
        most_negative = column;
      }
    }
    if (most_negative < 0) {
      if (!(c[0] > 0)) return std::nullopt;
      return c;
    }
    std::vector<int> rest;
    for (int column : kept) {
      if (column != most_negative) rest.push_back(column);
    }
    kept = std::move(rest);
  }
}

double MicroBatchRefit::Predict(const Row& row, const Coefficients& c) {
  double predicted = 0;
  for (int j = 0; j < kColumns; ++j) predicted += row[j] * c[j];
  return predicted;
}

}  // namespace dcp
