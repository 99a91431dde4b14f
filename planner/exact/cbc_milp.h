#ifndef DCP_PLANNER_CBC_MILP_H_
#define DCP_PLANNER_CBC_MILP_H_

#include <limits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace dcp {

/// A mixed-integer linear program to minimise, built column by column and
/// row by row. Plain value; not thread-safe.
class MilpProblem {
 public:
  static constexpr double kInfinity = std::numeric_limits<double>::infinity();
  /// Adds a column with bounds [lower, upper] and objective coefficient;
  /// returns its index.
  int AddColumn(double lower, double upper, double objective, bool integer);
  int AddBinary(double objective = 0) {
    return AddColumn(0, 1, objective, /*integer=*/true);
  }
  /// Adds lower <= sum coefficient * column <= upper.
  void AddRow(std::vector<std::pair<int, double>> terms, double lower,
              double upper);
  int num_columns() const { return static_cast<int>(lower_.size()); }
  int num_rows() const { return static_cast<int>(row_lower_.size()); }
  /// What was added, for checks.
  double column_lower(int column) const { return lower_[column]; }
  double column_upper(int column) const { return upper_[column]; }
  double objective(int column) const { return objective_[column]; }
  bool is_integer(int column) const { return integer_[column] != 0; }
  const std::vector<std::pair<int, double>>& row(int r) const {
    return rows_[r];
  }
  double row_lower(int r) const { return row_lower_[r]; }
  double row_upper(int r) const { return row_upper_[r]; }

 private:
  friend struct CbcAccess;
  std::vector<double> lower_, upper_, objective_;
  std::vector<char> integer_;
  std::vector<std::vector<std::pair<int, double>>> rows_;
  std::vector<double> row_lower_, row_upper_;
};

/// What CBC made of a MilpProblem. Plain value.
struct MilpSolution {
  /// An integer-feasible solution was found (values holds it).
  bool feasible = false;
  /// CBC proved it optimal to the gap asked for, or proved that nothing
  /// beats the cutoff (then feasible is false).
  bool proven = false;
  double objective = MilpProblem::kInfinity;
  /// No solution is better than this (the cutoff where pruned).
  double best_bound = -MilpProblem::kInfinity;
  std::vector<double> values;
};

/// Solves `problem` with CBC (its default cuts and heuristics, one thread,
/// no output), within `time_limit_seconds` of this process's CPU time
/// (CBC's clock), searching only
/// for solutions below `cutoff`. INTERNAL if CBC abandons the solve.
absl::StatusOr<MilpSolution> SolveWithCbc(const MilpProblem& problem,
                                          double time_limit_seconds,
                                          double relative_gap, double cutoff);

}  // namespace dcp

#endif  // DCP_PLANNER_CBC_MILP_H_
