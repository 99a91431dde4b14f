// PlannerPlanSource and StrategyPlanSource against a FakePlannerClient.

#include "worker/plan_source.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/client/batch_fingerprint.h"
#include "planner/client/fake_planner_client.h"
#include "planner/client/proto_convert.h"
#include "planner/plan/plan.h"
#include "planner/strategies/peer_registry.h"
#include "worker/one_rank_planner_answers.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::SizeIs;

const std::vector<Sample> kBatch = {{/*id=*/10, /*length_tokens=*/32},
                                    {/*id=*/11, /*length_tokens=*/64},
                                    {/*id=*/12, /*length_tokens=*/16}};

/// Every sequence of `batch` in one micro-batch, planner parameters v3.
v1::GetPlanResponse OneMicroBatch(const v1::GlobalBatch& batch) {
  return OneMicroBatchPlan(batch, /*params_version=*/3);
}

struct Fixture {
  explicit Fixture(bool submits_ahead) {
    PlannerPlanSourceOptions options;
    options.worker_id = "worker-a";
    options.incarnation = "00000000deadbeef";
    options.rank = 0;
    options.submits_ahead = submits_ahead;
    options.model = *ModelPreset("tiny");
    options.cluster = OneRankCluster();
    options.log = [this](const std::string& line) { logged.push_back(line); };
    source = std::make_unique<PlannerPlanSource>(planner, options);
  }
  FakePlannerClient planner;
  std::vector<std::string> logged;
  std::unique_ptr<PlannerPlanSource> source;
};

TEST(PlannerPlanSourceTest, AsksByFingerprintThenWithTheBatch) {
  Fixture fixture(/*submits_ahead=*/false);
  fixture.planner.get_plan.answer = [](const v1::GetPlanRequest& request)
      -> absl::StatusOr<v1::GetPlanResponse> {
    if (request.batch().samples_size() == 0) {
      return absl::FailedPreconditionError("step 4 is unknown");
    }
    return OneMicroBatch(request.batch());
  };
  absl::StatusOr<PlanOfStep> plan = fixture.source->PlanOf(kBatch, /*step=*/4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->params_version, 3);
  ASSERT_THAT(plan->plan.groups, SizeIs(1));
  EXPECT_THAT(plan->plan.groups[0].micro_batches[0].sequence_indices,
              SizeIs(3));
  const std::vector<v1::GetPlanRequest> requests =
      fixture.planner.get_plan.requests();
  ASSERT_THAT(requests, SizeIs(2));
  EXPECT_EQ(requests[0].step(), 4);
  EXPECT_EQ(requests[0].batch().samples_size(), 0);
  EXPECT_EQ(requests[0].batch_fingerprint(), BatchFingerprint(kBatch));
  EXPECT_EQ(requests[1].batch().step(), 4);
  EXPECT_EQ(requests[1].batch().samples_size(), 3);
  for (const v1::GetPlanRequest& request : requests) {
    EXPECT_EQ(request.worker_id(), "worker-a");
    EXPECT_EQ(request.incarnation(), "00000000deadbeef");
  }
}

TEST(PlannerPlanSourceTest, RefusesAPlanMadeForOtherSamples) {
  Fixture fixture(/*submits_ahead=*/false);
  fixture.planner.get_plan.answer = [](const v1::GetPlanRequest& request)
      -> absl::StatusOr<v1::GetPlanResponse> {
    v1::GlobalBatch other = GlobalBatchProto(kBatch, request.step());
    other.mutable_samples(1)->set_id(99);
    return OneMicroBatch(other);
  };
  const absl::Status status = fixture.source->PlanOf(kBatch, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("other sample ids"));
}

TEST(PlannerPlanSourceTest, TakesAPlanOfPhasesAndChecksItOverAllPhases) {
  for (const bool repeat : {false, true}) {
    Fixture fixture(/*submits_ahead=*/false);
    fixture.planner.get_plan.answer =
        [repeat](const v1::GetPlanRequest& request)
        -> absl::StatusOr<v1::GetPlanResponse> {
      v1::GetPlanResponse response =
          TwoHalvesPlan(GlobalBatchProto(kBatch, request.step()),
                        /*params_version=*/3, /*phased=*/true);
      if (repeat) {
        // Sequence 0 (phase 0) planned in phase 1 too.
        response.mutable_plan()
            ->mutable_phases(1)
            ->mutable_groups(0)
            ->mutable_micro_batches(0)
            ->add_sequence_indices(0);
      }
      return response;
    };
    absl::StatusOr<PlanOfStep> plan = fixture.source->PlanOf(kBatch, 2);
    if (repeat) {
      EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(plan.status().message(),
                  AllOf(HasSubstr("the plan of step 2"),
                        HasSubstr("sequence 0 is planned twice (phases 0 and "
                                  "1)")));
      continue;
    }
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(plan->IsPhased());
    EXPECT_TRUE(plan->plan.groups.empty());
    EXPECT_EQ(plan->params_version, 3);
    EXPECT_EQ(plan->phased.strategy, "dcp-phased");
    ASSERT_THAT(plan->phased.phases, SizeIs(2));
    EXPECT_THAT(
        plan->phased.phases[0].groups[0].micro_batches[0].sequence_indices,
        testing::ElementsAre(0));
    EXPECT_THAT(
        plan->phased.phases[1].groups[0].micro_batches[0].sequence_indices,
        testing::ElementsAre(1, 2));
  }
}

TEST(PlannerPlanSourceTest, ReportsTheMicroBatchesPhaseAfterPhase) {
  Fixture fixture(/*submits_ahead=*/false);
  fixture.planner.report_step_stats.answer =
      [](const v1::ReportStepStatsRequest&)
      -> absl::StatusOr<v1::ReportStepStatsResponse> {
    return v1::ReportStepStatsResponse();
  };
  StepMeasurement measured;
  measured.totals.step_seconds = 1.0;
  measured.totals.idle_seconds = 0.25;
  measured.micro_batches = {{0.25, 0.125, /*phase=*/0}, {0.5, 0, /*phase=*/1}};
  fixture.source->StepMeasured(/*step=*/5, measured);
  const std::vector<v1::ReportStepStatsRequest> reports =
      fixture.planner.report_step_stats.requests();
  ASSERT_THAT(reports, SizeIs(1));
  EXPECT_EQ(reports[0].incarnation(), "00000000deadbeef");
  ASSERT_EQ(reports[0].micro_batches_size(), 2);
  EXPECT_EQ(reports[0].micro_batches(0).micro_batch_index(), 0);
  EXPECT_EQ(reports[0].micro_batches(0).phase(), 0);
  EXPECT_EQ(reports[0].micro_batches(1).micro_batch_index(), 1);
  EXPECT_EQ(reports[0].micro_batches(1).phase(), 1);
  EXPECT_EQ(reports[0].micro_batches(1).compute_seconds(), 0.5);
  EXPECT_EQ(reports[0].micro_batches(1).idle_seconds(), 0.25);
}

TEST(PlannerPlanSourceTest, SubmitsAheadOnlyWhenAskedAndOnlyWarns) {
  Fixture quiet(/*submits_ahead=*/false);
  quiet.source->BatchKnown(kBatch, 1);
  EXPECT_THAT(quiet.planner.submit_batches.requests(), SizeIs(0));

  Fixture ahead(/*submits_ahead=*/true);
  ahead.planner.submit_batches.answer = [](const v1::SubmitBatchesRequest&)
      -> absl::StatusOr<v1::SubmitBatchesResponse> {
    return absl::UnavailableError("planner restarting");
  };
  ahead.source->BatchKnown(kBatch, 1);
  ASSERT_THAT(ahead.planner.submit_batches.requests(), SizeIs(1));
  EXPECT_EQ(ahead.planner.submit_batches.requests()[0].batches(0).step(), 1);
  // The planner takes only a registered worker's batches.
  EXPECT_EQ(ahead.planner.submit_batches.requests()[0].worker_id(), "worker-a");
  EXPECT_EQ(ahead.planner.submit_batches.requests()[0].incarnation(),
            "00000000deadbeef");
  EXPECT_THAT(ahead.logged,
              Contains(HasSubstr("warning: SubmitBatches of step 1 failed")));
}

TEST(PlannerPlanSourceTest, ReportsTheIdleTimeWithTheLastMicroBatch) {
  Fixture fixture(/*submits_ahead=*/false);
  StepMeasurement measured;
  measured.totals.step_seconds = 2;
  measured.totals.idle_seconds = 0.5;
  measured.totals.peak_memory_bytes = 1000;
  measured.micro_batches = {{/*compute_seconds=*/0.75,
                             /*communication_seconds=*/0.25},
                            {/*compute_seconds=*/0.25,
                             /*communication_seconds=*/-1}};
  fixture.source->StepMeasured(/*step=*/6, measured);
  ASSERT_THAT(fixture.planner.report_step_stats.requests(), SizeIs(1));
  const v1::ReportStepStatsRequest report =
      fixture.planner.report_step_stats.requests()[0];
  EXPECT_EQ(report.step(), 6);
  EXPECT_EQ(report.worker_id(), "worker-a");
  EXPECT_EQ(report.step_seconds(), 2);
  ASSERT_EQ(report.micro_batches_size(), 2);
  EXPECT_EQ(report.micro_batches(0).compute_seconds(), 0.75);
  EXPECT_EQ(report.micro_batches(0).idle_seconds(), 0);
  EXPECT_EQ(report.micro_batches(1).idle_seconds(), 0.5);
  EXPECT_EQ(report.micro_batches(1).communication_seconds(), 0);
  EXPECT_EQ(report.micro_batches(1).peak_memory_bytes(), 1000);
}

TEST(StrategyPlanSourceTest, PlansLocallyOnThePlannersCostModel) {
  FakePlannerClient planner;
  planner.get_cluster_model.answer = [](const v1::GetClusterModelRequest&)
      -> absl::StatusOr<v1::GetClusterModelResponse> {
    return TinyClusterModel(/*using_default_params=*/false,
                            /*params_version=*/2);
  };
  std::vector<std::string> logged;
  StaticOptions options;
  options.micro_batch_sequences = 1;
  absl::StatusOr<std::unique_ptr<StrategyPlanSource>> source =
      StrategyPlanSource::Create(
          planner, "bucket", options, {},
          [&](const std::string& line) { logged.push_back(line); });
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT(logged, Contains(HasSubstr("cost model v2")));
  (*source)->BatchKnown(kBatch, 0);
  absl::StatusOr<PlanOfStep> plan = (*source)->PlanOf(kBatch, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->params_version, 0);
  ASSERT_THAT(plan->plan.groups, SizeIs(1));
  // One sequence per micro-batch on the only rank.
  EXPECT_THAT(plan->plan.groups[0].micro_batches, SizeIs(3));
  EXPECT_GT(plan->plan.predicted_step_seconds, 0);
  (*source)->StepMeasured(0, StepMeasurement());
  EXPECT_THAT(planner.get_plan.requests(), SizeIs(0));
  EXPECT_THAT(planner.submit_batches.requests(), SizeIs(0));
  EXPECT_THAT(planner.report_step_stats.requests(), SizeIs(0));
}

// The peers tuned over a run are tuned on the run's batches and say how;
// dcp's own strategies and unknown names are refused, naming the peers.
TEST(StrategyPlanSourceTest, TunesPeersOnTheRunAndRefusesDcp) {
  FakePlannerClient planner;
  planner.get_cluster_model.answer = [](const v1::GetClusterModelRequest&)
      -> absl::StatusOr<v1::GetClusterModelResponse> {
    return TinyClusterModel(/*using_default_params=*/false,
                            /*params_version=*/2);
  };
  std::vector<int64_t> lengths;
  for (const Sample& sample : kBatch) lengths.push_back(sample.length_tokens);
  for (const char* peer : {"best-static", "megatron-dyncp"}) {
    SCOPED_TRACE(peer);
    std::vector<std::string> logged;
    absl::StatusOr<std::unique_ptr<StrategyPlanSource>> source =
        StrategyPlanSource::Create(
            planner, peer, StaticOptions(),
            [&]() -> absl::StatusOr<std::vector<std::vector<int64_t>>> {
              return std::vector<std::vector<int64_t>>{lengths, lengths};
            },
            [&](const std::string& line) { logged.push_back(line); });
    ASSERT_TRUE(source.ok()) << source.status();
    ASSERT_THAT(logged, SizeIs(1));
    EXPECT_THAT(logged[0], HasSubstr(absl::StrCat(peer, " plans")));
    EXPECT_THAT(logged[0], HasSubstr("("));  // its tuned setting
    absl::StatusOr<PlanOfStep> plan = (*source)->PlanOf(kBatch, 0);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_GT(plan->IsPhased() ? plan->phased.predicted_step_seconds
                               : plan->plan.predicted_step_seconds,
              0);
  }
  for (const char* refused : {"dcp", "dcp-phased", "magic"}) {
    absl::StatusOr<std::unique_ptr<StrategyPlanSource>> source =
        StrategyPlanSource::Create(planner, refused, StaticOptions(), {},
                                   [](const std::string&) {});
    EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(source.status().message(),
                AllOf(HasSubstr(refused), HasSubstr("megatron-dyncp")));
  }
  EXPECT_TRUE(IsPeerStrategy("bucket"));
  EXPECT_FALSE(IsPeerStrategy("dcp-one-layout"));
}

TEST(StrategyPlanSourceTest,
     PredictionsFollowTheMeasuredComputeButNotThePlans) {
  FakePlannerClient planner;
  planner.get_cluster_model.answer = [](const v1::GetClusterModelRequest&)
      -> absl::StatusOr<v1::GetClusterModelResponse> {
    return TinyClusterModel(/*using_default_params=*/false,
                            /*params_version=*/2);
  };
  StaticOptions options;
  options.micro_batch_sequences = 1;
  absl::StatusOr<std::unique_ptr<StrategyPlanSource>> source =
      StrategyPlanSource::Create(
          planner, "bucket", options, {}, [](const std::string&) {},
          /*rank=*/0);
  ASSERT_TRUE(source.ok()) << source.status();
  const absl::StatusOr<PlanOfStep> first = (*source)->PlanOf(kBatch, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  // Every micro-batch's compute measured at twice its prediction (SP 1:
  // no all-to-alls).
  auto measure = [](const PlanOfStep& plan) {
    StepMeasurement measured;
    for (const MicroBatchPlan& micro_batch :
         plan.plan.groups[0].micro_batches) {
      measured.micro_batches.push_back(
          {/*compute_seconds=*/2 * micro_batch.predicted_seconds,
           /*communication_seconds=*/0, /*phase=*/0});
    }
    return measured;
  };
  // Three micro-batches are too few to refit (RefitAccumulator needs 4).
  (*source)->StepMeasured(0, measure(*first));
  const absl::StatusOr<PlanOfStep> second = (*source)->PlanOf(kBatch, 1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->plan.predicted_step_seconds,
            first->plan.predicted_step_seconds);
  // A measurement of another step than the one planned last is ignored.
  (*source)->StepMeasured(0, measure(*first));
  (*source)->StepMeasured(1, measure(*first));
  const absl::StatusOr<PlanOfStep> third = (*source)->PlanOf(kBatch, 2);
  ASSERT_TRUE(third.ok());
  const std::vector<MicroBatchPlan>& before =
      first->plan.groups[0].micro_batches;
  const std::vector<MicroBatchPlan>& after =
      third->plan.groups[0].micro_batches;
  ASSERT_EQ(after.size(), before.size());
  for (size_t m = 0; m < after.size(); ++m) {
    // The same plan, priced at the measured speed.
    EXPECT_EQ(after[m].sequence_indices, before[m].sequence_indices);
    EXPECT_EQ(after[m].checkpointed_layers, before[m].checkpointed_layers);
    EXPECT_NEAR(after[m].predicted_seconds / before[m].predicted_seconds, 2,
                1e-9);
  }
  EXPECT_GT(third->plan.predicted_step_seconds,
            1.5 * first->plan.predicted_step_seconds);
  // Rates halved, as measured.
  const CostModel fetched = *CostModel::Create(
      ModelSpecFromProto(TinyClusterModel(false, 2).model()),
      ClusterSpecFromProto(TinyClusterModel(false, 2).cluster()),
      CostParamsFromProto(TinyClusterModel(false, 2).params()));
  EXPECT_NEAR(
      (*source)->pricing_model().params().compute.gemm_flops_per_second /
          fetched.params().compute.gemm_flops_per_second,
      0.5, 1e-9);
}

}  // namespace
}  // namespace dcp
