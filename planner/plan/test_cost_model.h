#ifndef DCP_PLANNER_TEST_COST_MODEL_H_
#define DCP_PLANNER_TEST_COST_MODEL_H_

// The cost model the planner's tests plan against. testonly.

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "cost_model/cost_model.h"
#include "gtest/gtest.h"

namespace dcp {

/// The public-figure defaults for `preset` on an H200 cluster of
/// num_nodes x gpus_per_node; a test failure (and a crash on use) if the
/// preset or cluster is invalid.
inline CostModel MakeCostModel(const std::string& preset, int num_nodes,
                               int gpus_per_node) {
  absl::StatusOr<ModelSpec> model = ModelPreset(preset);
  EXPECT_TRUE(model.ok()) << model.status();
  absl::StatusOr<CostModel> cost_model =
      CostModel::CreateDefault(*model, H200Cluster(num_nodes, gpus_per_node));
  EXPECT_TRUE(cost_model.ok()) << cost_model.status();
  return *std::move(cost_model);
}

/// The same with ZeRO-3 (bf16 weights, gradients and optimizer states all
/// sharded over the world).
inline CostModel MakeZero3CostModel(const std::string& preset, int num_nodes,
                                    int gpus_per_node) {
  absl::StatusOr<ModelSpec> model = ModelPreset(preset);
  EXPECT_TRUE(model.ok()) << model.status();
  const ClusterSpec cluster = H200Cluster(num_nodes, gpus_per_node);
  CostParams params = DefaultCostParams(*model, cluster);
  SetTrainingStateBytes(TrainingPrecision::kBf16, ParameterSharding::kZero3,
                        params.memory);
  absl::StatusOr<CostModel> cost_model =
      CostModel::Create(*model, cluster, params);
  EXPECT_TRUE(cost_model.ok()) << cost_model.status();
  return *std::move(cost_model);
}

}  // namespace dcp

#endif  // DCP_PLANNER_TEST_COST_MODEL_H_
