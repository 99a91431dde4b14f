// What a planner answers a world of one rank running the tiny model, for
// tests that program a FakePlannerClient (agent, plan sources, profiling).

#ifndef DCP_WORKER_ONE_RANK_PLANNER_ANSWERS_H_
#define DCP_WORKER_ONE_RANK_PLANNER_ANSWERS_H_

#include <cstdint>

#include "cost_model/cluster_spec.h"
#include "dcp/v1/planner_service.pb.h"

namespace dcp {

/// One node of one H200-like rank with 1 GB of memory.
ClusterSpec OneRankCluster();

/// GetClusterModel of the tiny model on OneRankCluster with its default
/// cost parameters, `params_version`, using_default_params as given, and
/// one fit report: "gemm", 4 samples, 5% rms and 10% max error.
v1::GetClusterModelResponse TinyClusterModel(bool using_default_params,
                                             int64_t params_version);

/// GetPlan's answer for `batch`: every sequence in one micro-batch on rank
/// 0, predicted 0.5 s, the batch's sample ids, `params_version`.
v1::GetPlanResponse OneMicroBatchPlan(const v1::GlobalBatch& batch,
                                      int64_t params_version);

/// The batch split in two halves (sequences [0, n/2) and [n/2, n)) on rank
/// 0: with `phased`, a plan of two phases of one micro-batch each
/// (strategy "dcp-phased", predicted 0.6 s); without, one layout of the
/// same two micro-batches (strategy "dcp", predicted 0.5 s). Both train
/// alike. Sample ids and `params_version` as OneMicroBatchPlan.
v1::GetPlanResponse TwoHalvesPlan(const v1::GlobalBatch& batch,
                                  int64_t params_version, bool phased);

}  // namespace dcp

#endif  // DCP_WORKER_ONE_RANK_PLANNER_ANSWERS_H_
