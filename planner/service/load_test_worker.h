// The load test's simulated workers: what one remembers between its calls,
// and the reports it makes from a plan. Internal to load_test_lib.

#ifndef DCP_PLANNER_SERVICE_LOAD_TEST_WORKER_H_
#define DCP_PLANNER_SERVICE_LOAD_TEST_WORKER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dcp/v1/planner_service.pb.h"
#include "planner/client/planner_client.h"
#include "planner/service/load_test.h"
#include "planner/service/load_test_threads.h"

namespace dcp {

/// One simulated worker (one node). Touched by one client thread at a time.
struct SimulatedWorker {
  std::string worker_id;
  std::string node_name;
  /// One of the shared connections.
  GrpcPlannerClient* client = nullptr;
  int first_rank = -1;
  /// This step's reports, made from the plan it fetched.
  std::vector<v1::ReportStepStatsRequest> reports;
  /// PlanDigest of the plan it got (compared across workers).
  std::optional<size_t> plan_digest;
};

/// A hash of what the workers act on in `plan`: its predicted step time and
/// every group's ranks, and every micro-batch's sequences and recompute.
size_t PlanDigest(const v1::Plan& plan);

/// The reports of `worker`'s ranks for the plan in `response`; problems
/// (a rank without a group) go to `log`.
void MakeReports(const v1::GetPlanResponse& response, int64_t step,
                 int num_ranks, const LoadTestOptions& options,
                 SimulatedWorker& worker, ThreadLog& log);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_LOAD_TEST_WORKER_H_
