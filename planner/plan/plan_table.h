#ifndef DCP_PLANNER_PLAN_TABLE_H_
#define DCP_PLANNER_PLAN_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "cost_model/cost_model.h"
#include "planner/plan/plan.h"

namespace dcp {

/// "3" for one rank, "0-7" for a contiguous run, "0,5,9" otherwise; "-" for
/// none.
std::string DescribeRankList(const std::vector<int>& ranks);

/// A plan for people (`dcp plan --format=table`): a summary line (step,
/// slowest group, exposed all-reduce, lower bound and gap, peak memory),
/// then one aligned row per group with its ranks, SP size, predicted
/// seconds and each micro-batch's tokens and checkpointed layers. The
/// plan's own predictions are printed (call PredictPlan first).
std::string PlanToTable(const Plan& plan,
                        absl::Span<const int64_t> lengths_tokens,
                        const CostModel& cost_model);

}  // namespace dcp

#endif  // DCP_PLANNER_PLAN_TABLE_H_
