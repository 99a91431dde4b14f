#ifndef DCP_PLANNER_SERVICE_PLANNER_HANDLER_TEST_SUPPORT_H_
#define DCP_PLANNER_SERVICE_PLANNER_HANDLER_TEST_SUPPORT_H_

// What the PlannerHandler tests (planner_handler_*test.cc) share: a recorder
// of the handler's log, the test worlds, batches and requests (the metrics
// recorder lives beside PlannerMetrics: recording_planner_metrics.h).
// testonly.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/fake_clock.h"
#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/client/batch_fingerprint.h"
#include "planner/client/proto_convert.h"
#include "planner/service/planner_handler.h"
#include "planner/service/planner_metrics.h"
#include "planner/service/recording_planner_metrics.h"
#include "planner/service/test_batches.h"

namespace dcp {

// The PlanShapeReport a plan should produce, computed from its proto.
inline PlanShapeReport ShapeOf(const v1::Plan& plan) {
  PlanShapeReport shape;
  int64_t checkpointed_sum = 0;
  for (const v1::Group& group : plan.groups()) {
    ++shape.groups_by_sp_size[group.sp_size()];
    for (const v1::MicroBatch& micro_batch : group.micro_batches()) {
      ++shape.micro_batches;
      checkpointed_sum += micro_batch.checkpointed_layers();
      shape.max_checkpointed_layers = std::max(
          shape.max_checkpointed_layers, micro_batch.checkpointed_layers());
    }
  }
  if (shape.micro_batches > 0) {
    shape.mean_checkpointed_layers =
        static_cast<double>(checkpointed_sum) / shape.micro_batches;
  }
  return shape;
}

// Collects log lines. Thread-safe.
class LogLines {
 public:
  std::function<void(const std::string&)> Sink() {
    return [this](const std::string& line) {
      absl::MutexLock lock(&mu_);
      lines_.push_back(line);
    };
  }
  std::vector<std::string> lines() const {
    absl::MutexLock lock(&mu_);
    return lines_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> lines_;
};

// llama3-8b on 4 nodes x 8 GPUs.
inline PlannerHandlerOptions GpuOptions() {
  PlannerHandlerOptions options;
  options.model = ModelPreset("llama3-8b").value();
  options.cluster = H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/8);
  options.background_planning_threads = 0;
  return options;
}

// The tiny model on 4 nodes x 1 rank (the CPU demo's shape).
inline PlannerHandlerOptions CpuOptions() {
  PlannerHandlerOptions options;
  options.model = ModelPreset("tiny").value();
  options.cluster = H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/1);
  options.background_planning_threads = 0;
  return options;
}

inline v1::RegisterWorkerRequest Worker(const std::string& id,
                                        const std::string& node,
                                        int num_ranks) {
  v1::RegisterWorkerRequest request;
  request.set_worker_id(id);
  request.set_node_name(node);
  request.set_num_ranks(num_ranks);
  request.set_gpu_kind("H200");
  request.set_address(absl::StrCat(node, ":29500"));
  request.set_backend("nccl");
  request.set_max_cached_groups(kDefaultNcclMaxCachedGroups);
  request.set_libtorch_version("2.4.0");
  return request;
}

// The worker that submits batches in these tests (RegisterWorld's first):
// SubmitBatches takes only a registered worker's batches.
inline constexpr char kSubmitter[] = "w0";

// Registers `nodes` nodes of one worker each holding every GPU of its node.
inline void RegisterWorld(PlannerHandler& handler, int nodes,
                          int ranks_per_node) {
  for (int n = 0; n < nodes; ++n) {
    ASSERT_TRUE(
        handler
            .RegisterWorker(Worker(absl::StrCat("w", n),
                                   absl::StrCat("node", n), ranks_per_node))
            .ok());
  }
}

// A deterministic batch of `n` sequences (1k..16k tokens, a few long).
inline v1::GlobalBatch MakeBatch(int64_t step, int n = 48, int64_t salt = 0) {
  std::vector<int64_t> lengths;
  for (int i = 0; i < n; ++i) {
    lengths.push_back(1000 + ((i + 7 * step + salt) * 2654435761LL) % 15000 +
                      (i % 16 == 0 ? 40000 : 0));
  }
  return BatchOfLengths(step, lengths, /*first_id=*/1000 * step);
}

inline v1::GetPlanRequest PlanRequest(const std::string& worker,
                                      const v1::GlobalBatch& batch) {
  v1::GetPlanRequest request;
  request.set_worker_id(worker);
  *request.mutable_batch() = batch;
  return request;
}

// kSubmitter's SubmitBatches request for `batches`.
inline v1::SubmitBatchesRequest SubmitRequest(
    std::vector<v1::GlobalBatch> batches) {
  v1::SubmitBatchesRequest request;
  request.set_worker_id(kSubmitter);
  for (v1::GlobalBatch& batch : batches) {
    *request.add_batches() = std::move(batch);
  }
  return request;
}

// `worker`'s report of `rank` at `step`, without micro-batch statistics.
inline v1::ReportStepStatsRequest StepReport(const std::string& worker,
                                             int64_t step, int rank,
                                             double step_seconds) {
  v1::ReportStepStatsRequest request;
  request.set_worker_id(worker);
  request.set_step(step);
  request.set_rank(rank);
  request.set_step_seconds(step_seconds);
  return request;
}

inline std::unique_ptr<PlannerHandler> MakeHandler(
    PlannerHandlerOptions options, const Clock& clock, PlannerMetrics* metrics,
    LogLines* log = nullptr) {
  std::function<void(const std::string&)> sink;
  if (log != nullptr) {
    sink = log->Sink();
  } else if (std::getenv("DCP_TEST_LOG") != nullptr) {
    sink = [](const std::string& line) { std::cerr << line << "\n"; };
  }
  auto handler =
      PlannerHandler::Create(std::move(options), clock, metrics, sink);
  EXPECT_TRUE(handler.ok()) << handler.status();
  return handler.ok() ? *std::move(handler) : nullptr;
}

// Profile samples from a "real" cluster unlike the defaults.
inline v1::SubmitProfileRequest Profile(const PlannerHandlerOptions& options,
                                        const std::string& worker,
                                        uint64_t seed) {
  CostParams truth = DefaultCostParams(options.model, options.cluster);
  truth.compute.gemm_flops_per_second = 600e12;
  truth.compute.gemm_half_efficiency_tokens = 400;
  truth.compute.attention_forward_flops_per_second *= 0.8;
  truth.compute.attention_backward_flops_per_second *= 0.8;
  truth.comm.all_to_all_intra_bus_bytes_per_second /= 2;
  const CostModel model =
      CostModel::Create(options.model, options.cluster, truth).value();
  v1::SubmitProfileRequest request;
  request.set_worker_id(worker);
  for (const ProfileSample& sample :
       SyntheticProfile(model, seed, /*relative_noise=*/0.01)) {
    *request.add_samples() = ProfileSampleToProto(sample);
  }
  return request;
}

inline v1::GetPlanRequest StepRequest(const std::string& worker, int64_t step,
                                      uint64_t fingerprint = 0) {
  v1::GetPlanRequest request;
  request.set_worker_id(worker);
  request.set_step(step);
  request.set_batch_fingerprint(fingerprint);
  return request;
}

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_PLANNER_HANDLER_TEST_SUPPORT_H_
