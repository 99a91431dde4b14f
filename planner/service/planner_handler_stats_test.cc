// The handler end to end: step reports, metrics, online refit, liveness.

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/fake_clock.h"
#include "cost_model/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/service/planner_handler.h"
#include "planner/service/planner_handler_test_support.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

// Reports of one CPU-world step: every rank's step seconds and micro-batch
// compute times at `factor` times the prediction.
std::vector<v1::ReportStepStatsRequest> ReportsFor(
    const v1::GetPlanResponse& plan, double factor,
    const std::vector<double>& step_seconds_by_rank,
    const std::vector<std::pair<std::string, int>>& worker_of_rank) {
  std::vector<v1::ReportStepStatsRequest> reports;
  for (const v1::Group& group : plan.plan().groups()) {
    for (int rank : group.ranks()) {
      v1::ReportStepStatsRequest report = StepReport(
          worker_of_rank[rank].first, plan.plan().step(), rank,
          step_seconds_by_rank.empty() ? factor * group.predicted_seconds()
                                       : step_seconds_by_rank[rank]);
      for (int m = 0; m < group.micro_batches_size(); ++m) {
        v1::MicroBatchStats* stats = report.add_micro_batches();
        stats->set_micro_batch_index(m);
        stats->set_compute_seconds(factor *
                                   group.micro_batches(m).predicted_seconds());
        stats->set_peak_memory_bytes(
            group.micro_batches(m).predicted_peak_bytes());
      }
      reports.push_back(report);
    }
  }
  return reports;
}

TEST(PlannerHandlerTest, StepStatsFeedMetricsAndImbalance) {
  FakeClock clock;
  RecordingMetrics metrics;
  // One layout (ReportsFor reads the plan's groups).
  PlannerHandlerOptions options = CpuOptions();
  PhasedPlanningOptions one_layout;
  one_layout.enabled = false;
  options.make_step_plan = StepPlanMaker(one_layout);
  auto handler = MakeHandler(options, clock, &metrics);
  RegisterWorld(*handler, 4, 1);
  const v1::GetPlanResponse plan =
      handler->GetPlan(PlanRequest("w0", MakeBatch(0, 12))).value();
  std::vector<std::pair<std::string, int>> worker_of_rank;
  for (int r = 0; r < 4; ++r)
    worker_of_rank.push_back({absl::StrCat("w", r), r});
  const std::vector<double> seconds = {1.0, 2.0, 3.0, 4.0};
  std::vector<v1::ReportStepStatsRequest> reports =
      ReportsFor(plan, 1, seconds, worker_of_rank);
  ASSERT_EQ(reports.size(), 4u);
  double expected_error_sum = 0;
  for (size_t i = 0; i < reports.size(); ++i) {
    const v1::ReportStepStatsRequest& report = reports[i];
    double predicted = 0;
    for (const v1::Group& group : plan.plan().groups()) {
      for (int rank : group.ranks()) {
        if (rank == report.rank()) predicted = group.predicted_seconds();
      }
    }
    absl::StatusOr<v1::ReportStepStatsResponse> response =
        handler->ReportStepStats(report);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_DOUBLE_EQ(response->measured_over_predicted(),
                     report.step_seconds() / predicted);
    expected_error_sum +=
        std::abs(report.step_seconds() - predicted) / report.step_seconds();
    EXPECT_EQ(metrics.imbalances().size(), i + 1 == reports.size() ? 1u : 0u);
  }
  ASSERT_EQ(metrics.imbalances().size(), 1u);
  EXPECT_DOUBLE_EQ(metrics.imbalances()[0], (4.0 - 2.5) / 4.0);
  EXPECT_EQ(metrics.measured().size(), 4u);
  EXPECT_EQ(metrics.errors().size(), 4u);
  EXPECT_NEAR(handler->GetClusterModel({})->step_relative_error(),
              expected_error_sum / 4, 1e-12);
  // A repeated report replaces the earlier one; the imbalance is not
  // reported twice.
  ASSERT_TRUE(handler->ReportStepStats(reports[0]).ok());
  EXPECT_EQ(metrics.imbalances().size(), 1u);
  EXPECT_NEAR(handler->GetClusterModel({})->step_relative_error(),
              expected_error_sum / 4, 1e-12);

  // Reports are workers' and ranks' and steps' that exist.
  v1::ReportStepStatsRequest bad = reports[0];
  bad.set_step(9);
  EXPECT_EQ(handler->ReportStepStats(bad).status().code(),
            absl::StatusCode::kFailedPrecondition);
  bad = reports[0];
  bad.set_worker_id("ghost");
  EXPECT_EQ(handler->ReportStepStats(bad).status().code(),
            absl::StatusCode::kNotFound);
  // Each bad field is named in the error.
  const std::vector<
      std::pair<std::function<void(v1::ReportStepStatsRequest&)>, std::string>>
      bad_fields = {
          {[](auto& r) { r.set_worker_id("w1"); }, "rank = "},
          {[](auto& r) { r.set_rank(4); }, "rank = 4"},
          {[](auto& r) { r.set_step_seconds(std::nan("")); },
           "step_seconds = nan"},
          {[](auto& r) { r.set_step_seconds(0); }, "step_seconds = 0"},
          {[](auto& r) { r.add_micro_batches()->set_micro_batch_index(99); },
           "micro_batch_index = 99"},
          {[](auto& r) { r.mutable_micro_batches(0)->set_compute_seconds(-1); },
           "micro_batches[0].compute_seconds = -1"},
          {[](auto& r) {
             r.mutable_micro_batches(0)->set_idle_seconds(INFINITY);
           },
           "micro_batches[0].idle_seconds = inf"},
          {[](auto& r) {
             r.mutable_micro_batches(0)->set_peak_memory_bytes(-2);
           },
           "micro_batches[0].peak_memory_bytes = -2"},
          {[](auto& r) { *r.add_micro_batches() = r.micro_batches(0); },
           "repeats"},
          {[](auto& r) { r.set_step(-2); }, "step = -2"},
      };
  for (const auto& [spoil, message] : bad_fields) {
    SCOPED_TRACE(message);
    bad = reports[0];
    spoil(bad);
    EXPECT_THAT(handler->ReportStepStats(bad).status().message(),
                HasSubstr(message));
  }
}

/// One node of 8 GPUs with online refit on, worker w0 registered, and the
/// plan of step 0 (16 sequences).
class OnlineRefitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options.cluster = H200Cluster(/*num_nodes=*/1, /*gpus_per_node=*/8);
    options.online_refit = true;
    handler = MakeHandler(options, clock, &metrics);
    ASSERT_TRUE(handler->RegisterWorker(Worker("w0", "node0", 8)).ok());
    first = handler->GetPlan(PlanRequest("w0", MakeBatch(0, 16))).value();
  }

  FakeClock clock;
  RecordingMetrics metrics;
  PlannerHandlerOptions options = GpuOptions();
  std::unique_ptr<PlannerHandler> handler;
  const std::vector<std::pair<std::string, int>> worker_of_rank =
      std::vector<std::pair<std::string, int>>(8, {"w0", 0});
  v1::GetPlanResponse first;
};

TEST_F(OnlineRefitTest, FollowsMeasuredComputeTime) {
  EXPECT_EQ(first.params_version(), 0);
  for (const v1::ReportStepStatsRequest& report :
       ReportsFor(first, /*factor=*/2, {}, worker_of_rank)) {
    absl::StatusOr<v1::ReportStepStatsResponse> response =
        handler->ReportStepStats(report);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_NEAR(response->measured_over_predicted(), 2, 1e-9);
  }
  v1::GetClusterModelResponse model = handler->GetClusterModel({}).value();
  EXPECT_EQ(model.params_version(), 1);
  EXPECT_FALSE(model.using_default_params());
  const CostParams defaults = DefaultCostParams(options.model, options.cluster);
  // Micro-batch times include communication, so the compute factor is a bit
  // above 2.
  const double factor = defaults.compute.gemm_flops_per_second /
                        model.params().compute().gemm_flops_per_second();
  EXPECT_GT(factor, 1.95);
  EXPECT_LT(factor, 2.3);
  // The same batch planned for a later step is predicted about 2x slower.
  v1::GlobalBatch same = MakeBatch(0, 16);
  same.set_step(1);
  const v1::GetPlanResponse later =
      handler->GetPlan(PlanRequest("w0", same)).value();
  EXPECT_EQ(later.params_version(), 1);
  const double ratio = later.plan().predicted_step_seconds() /
                       first.plan().predicted_step_seconds();
  EXPECT_GT(ratio, 1.7);
  EXPECT_LT(ratio, 2.3);
  // Measurements that match the corrected model change nothing more.
  for (const v1::ReportStepStatsRequest& report :
       ReportsFor(later, /*factor=*/1, {}, worker_of_rank)) {
    ASSERT_TRUE(handler->ReportStepStats(report).ok());
  }
  EXPECT_EQ(handler->GetClusterModel({})->params_version(), 1);

  // A version asked for by number gives that version's parameters; an
  // unknown one is NOT_FOUND.
  v1::GetClusterModelRequest by_version;
  by_version.set_params_version(1);
  EXPECT_EQ(handler->GetClusterModel(by_version)->params().DebugString(),
            model.params().DebugString());
  by_version.set_params_version(7);
  const absl::Status unknown = handler->GetClusterModel(by_version).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.message(), HasSubstr("params_version = 7"));
}

TEST_F(OnlineRefitTest, AbsurdlySmallMeasurementsDoNotCorruptTheModel) {
  // Valid (finite, > 0) but so small that predicted / measured overflows.
  for (const v1::ReportStepStatsRequest& report :
       ReportsFor(first, /*factor=*/1e-320, {}, worker_of_rank)) {
    absl::StatusOr<v1::ReportStepStatsResponse> response =
        handler->ReportStepStats(report);
    ASSERT_TRUE(response.ok()) << response.status();
  }
  // No refit from them, and no non-finite error reached the metrics.
  EXPECT_EQ(handler->GetClusterModel({})->params_version(), 0);
  for (double error : metrics.errors()) EXPECT_TRUE(std::isfinite(error));
  v1::GlobalBatch next = MakeBatch(0, 16);
  next.set_step(1);
  const v1::GetPlanResponse later =
      handler->GetPlan(PlanRequest("w0", next)).value();
  EXPECT_EQ(later.plan().predicted_step_seconds(),
            first.plan().predicted_step_seconds());
}

TEST(PlannerHandlerTest, ListWorkersTracksLiveness) {
  FakeClock clock(absl::FromUnixSeconds(1'700'000'000));
  PlannerHandlerOptions options = CpuOptions();
  options.worker_liveness_timeout = absl::Seconds(60);
  auto handler = MakeHandler(options, clock, nullptr);
  RegisterWorld(*handler, 4, 1);
  auto states = [&] {
    std::vector<v1::WorkerInfo::State> result;
    const v1::ListWorkersResponse listed = handler->ListWorkers({}).value();
    for (const v1::WorkerInfo& info : listed.workers()) {
      result.push_back(info.state());
    }
    return result;
  };
  using State = v1::WorkerInfo;
  EXPECT_EQ(states(),
            (std::vector<v1::WorkerInfo::State>(4, State::REGISTERED)));
  clock.Advance(absl::Seconds(10));
  ASSERT_TRUE(handler->GetPlan(PlanRequest("w1", MakeBatch(7, 8))).ok());
  v1::ListWorkersResponse listed = handler->ListWorkers({}).value();
  EXPECT_EQ(listed.world_size(), 4);
  EXPECT_TRUE(listed.world_complete());
  EXPECT_EQ(listed.workers(1).state(), State::ACTIVE);
  EXPECT_EQ(listed.workers(1).last_step(), 7);
  EXPECT_EQ(listed.workers(1).last_seen_unix_millis(), 1'700'000'010'000);
  EXPECT_EQ(listed.workers(0).last_step(), -1);
  EXPECT_EQ(listed.workers(0).last_seen_unix_millis(), 1'700'000'000'000);
  EXPECT_EQ(listed.workers(2).backend(), "nccl");
  EXPECT_EQ(listed.workers(2).gpu_kind(), "H200");
  EXPECT_EQ(listed.workers(2).libtorch_version(), "2.4.0");
  clock.Advance(absl::Seconds(55));
  EXPECT_EQ(states(),
            (std::vector<v1::WorkerInfo::State>{State::LOST, State::ACTIVE,
                                                State::LOST, State::LOST}));
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(states()[1], State::LOST);
  // A report brings a worker back.
  ASSERT_TRUE(handler
                  ->ReportStepStats(StepReport("w3", /*step=*/7, /*rank=*/3,
                                               /*step_seconds=*/0.5))
                  .ok());
  EXPECT_EQ(states()[3], State::ACTIVE);
}

}  // namespace
}  // namespace dcp
