#include "planner/exact/cbc_milp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "Cbc_C_Interface.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp {

int MilpProblem::AddColumn(double lower, double upper, double objective,
                           bool integer) {
  lower_.push_back(lower);
  upper_.push_back(upper);
  objective_.push_back(objective);
  integer_.push_back(integer ? 1 : 0);
  return num_columns() - 1;
}

void MilpProblem::AddRow(std::vector<std::pair<int, double>> terms,
                         double lower, double upper) {
  rows_.push_back(std::move(terms));
  row_lower_.push_back(lower);
  row_upper_.push_back(upper);
}

struct CbcAccess {
  static void Load(const MilpProblem& p, Cbc_Model* model) {
    const int columns = p.num_columns();
    // Compressed sparse columns from the rows.
    std::vector<int> count(columns, 0);
    for (const auto& row : p.rows_) {
      for (const auto& [column, value] : row) ++count[column];
    }
    std::vector<CoinBigIndex> start(columns + 1, 0);
    for (int c = 0; c < columns; ++c) start[c + 1] = start[c] + count[c];
    std::vector<int> index(start[columns]);
    std::vector<double> value(start[columns]);
    std::vector<CoinBigIndex> next(start.begin(), start.end() - 1);
    for (int r = 0; r < p.num_rows(); ++r) {
      for (const auto& [column, coefficient] : p.rows_[r]) {
        index[next[column]] = r;
        value[next[column]] = coefficient;
        ++next[column];
      }
    }
    auto finite = [](double v) {
      return std::isinf(v)
                 ? std::copysign(std::numeric_limits<double>::max(), v)
                 : v;
    };
    std::vector<double> lower, upper, row_lower, row_upper;
    for (double v : p.lower_) lower.push_back(finite(v));
    for (double v : p.upper_) upper.push_back(finite(v));
    for (double v : p.row_lower_) row_lower.push_back(finite(v));
    for (double v : p.row_upper_) row_upper.push_back(finite(v));
    Cbc_loadProblem(model, columns, p.num_rows(), start.data(), index.data(),
                    value.data(), lower.data(), upper.data(),
                    p.objective_.data(), row_lower.data(), row_upper.data());
    for (int c = 0; c < columns; ++c) {
      if (p.integer_[c]) Cbc_setInteger(model, c);
    }
  }
};

absl::StatusOr<MilpSolution> SolveWithCbc(const MilpProblem& problem,
                                          double time_limit_seconds,
                                          double relative_gap, double cutoff) {
  Cbc_Model* model = Cbc_newModel();
  CbcAccess::Load(problem, model);
  Cbc_setLogLevel(model, 0);
  Cbc_setMaximumSeconds(model, std::max(0.01, time_limit_seconds));
  Cbc_setAllowableFractionGap(model, relative_gap);
  // CBC 2.10.8's diving heuristics trip an assertion on some of these
  // programs (CbcHeuristicDive::reducedCostFix); the others stay on.
  for (const char* dive :
       {"DivingSome", "DivingCoefficient", "DivingFractional", "DivingGuided",
        "DivingLineSearch", "DivingPseudoCost", "DivingVectorLength"}) {
    Cbc_setParameter(model, dive, "off");
  }
  const bool has_cutoff = std::isfinite(cutoff);
  if (has_cutoff) Cbc_setCutoff(model, cutoff);
  Cbc_solve(model);
  MilpSolution solution;
  const int status = Cbc_status(model);
  if (Cbc_isAbandoned(model) || status == 2) {
    Cbc_deleteModel(model);
    return absl::InternalError("CBC abandoned the MILP (numerical trouble)");
  }
  const double* best = Cbc_bestSolution(model);
  if (best != nullptr) {
    solution.feasible = true;
    solution.values.assign(best, best + problem.num_columns());
    solution.objective = Cbc_getObjValue(model);
  }
  // Stopped on time: status 1 with the seconds limit reached.
  const bool out_of_time = Cbc_isSecondsLimitReached(model) != 0;
  if (!out_of_time &&
      (Cbc_isProvenOptimal(model) || Cbc_isProvenInfeasible(model))) {
    solution.proven = true;
    solution.best_bound =
        solution.feasible
            ? std::min(solution.objective, Cbc_getBestPossibleObjValue(model))
            : (has_cutoff ? cutoff : MilpProblem::kInfinity);
  } else {
    solution.best_bound = Cbc_getBestPossibleObjValue(model);
  }
  Cbc_deleteModel(model);
  return solution;
}

}  // namespace dcp
