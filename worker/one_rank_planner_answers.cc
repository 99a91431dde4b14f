#include "worker/one_rank_planner_answers.h"

#include "cost_model/cost_model.h"
#include "cost_model/model_spec.h"
#include "planner/client/proto_convert.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"

namespace dcp {

ClusterSpec OneRankCluster() {
  ClusterSpec cluster = H200Cluster(/*num_nodes=*/1, /*gpus_per_node=*/1);
  cluster.gpu_memory_bytes = 1e9;
  return cluster;
}

v1::GetClusterModelResponse TinyClusterModel(bool using_default_params,
                                             int64_t params_version) {
  v1::GetClusterModelResponse response;
  const ModelSpec model = *ModelPreset("tiny");
  *response.mutable_model() = ModelSpecToProto(model);
  *response.mutable_cluster() = ClusterSpecToProto(OneRankCluster());
  // What a planner answers to a Gloo (CPU) worker: no GPU memory for its
  // communicators.
  CostParams params = DefaultCostParams(model, OneRankCluster());
  SetCommunicatorMemory(CommunicatorBackend::kGloo, /*max_cached_groups=*/0,
                        params.memory);
  *response.mutable_params() = CostParamsToProto(params);
  ModelFitReport report;
  report.name = "gemm";
  report.num_samples = 4;
  report.used_defaults = false;
  report.rms_relative_error = 0.05;
  report.max_relative_error = 0.1;
  *response.add_reports() = FitReportToProto(report);
  response.set_using_default_params(using_default_params);
  response.set_params_version(params_version);
  return response;
}

v1::GetPlanResponse OneMicroBatchPlan(const v1::GlobalBatch& batch,
                                      int64_t params_version) {
  Plan plan;
  plan.strategy = "dcp";
  GroupPlan group;
  group.ranks = {0};
  MicroBatchPlan micro_batch;
  for (int i = 0; i < batch.samples_size(); ++i) {
    micro_batch.sequence_indices.push_back(i);
  }
  group.micro_batches.push_back(micro_batch);
  plan.groups.push_back(group);
  plan.predicted_step_seconds = 0.5;
  v1::GetPlanResponse response;
  *response.mutable_plan() = PlanToProto(plan, batch.step());
  for (const v1::Sample& sample : batch.samples()) {
    response.add_sample_ids(sample.id());
  }
  response.set_params_version(params_version);
  return response;
}

v1::GetPlanResponse TwoHalvesPlan(const v1::GlobalBatch& batch,
                                  int64_t params_version, bool phased) {
  const int n = batch.samples_size();
  std::vector<MicroBatchPlan> halves(2);
  for (int i = 0; i < n; ++i) {
    halves[i < n / 2 ? 0 : 1].sequence_indices.push_back(i);
  }
  v1::GetPlanResponse response;
  if (phased) {
    PhasedPlan plan;
    plan.strategy = "dcp-phased";
    for (const MicroBatchPlan& half : halves) {
      Plan phase;
      phase.strategy = plan.strategy;
      GroupPlan group;
      group.ranks = {0};
      group.micro_batches.push_back(half);
      phase.groups.push_back(group);
      plan.phases.push_back(phase);
    }
    plan.predicted_step_seconds = 0.6;
    *response.mutable_plan() = PhasedPlanToProto(plan, batch.step());
  } else {
    Plan plan;
    plan.strategy = "dcp";
    GroupPlan group;
    group.ranks = {0};
    group.micro_batches = halves;
    plan.groups.push_back(group);
    plan.predicted_step_seconds = 0.5;
    *response.mutable_plan() = PlanToProto(plan, batch.step());
  }
  for (const v1::Sample& sample : batch.samples()) {
    response.add_sample_ids(sample.id());
  }
  response.set_params_version(params_version);
  return response;
}

}  // namespace dcp
