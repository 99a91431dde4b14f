// WorkerAgent in a world of one rank against a FakePlannerClient: the
// register/poll/profile/plan/report flow over a real c10d world of one, the
// bucket plan source, checkpoints with resume, and the error paths (planner
// unavailable, a world that never completes, a collective that times out,
// stopping while waiting). Over 600 lines: the flows share the scripted
// planner, the fake world and QuickRun at the top.

#include "worker/agent.h"

#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/fake_clock.h"
#include "common/test_files.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/client/batch_fingerprint.h"
#include "planner/client/fake_planner_client.h"
#include "planner/client/proto_convert.h"
#include "planner/plan/plan.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "prometheus/text_serializer.h"
#include "worker/communication/fake_communicator.h"
#include "worker/execution/checkpoint.h"
#include "worker/one_rank_planner_answers.h"
#include "worker/prometheus_worker_metrics.h"
#include "worker/run_summary.h"
#include "worker/step_timing_files.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

std::string TestDir(const std::string& name) {
  return EmptyTestDirectory("agent_test_" + name);
}

struct SubmittedBatches {
  absl::Mutex mutex;
  std::map<int64_t, v1::GlobalBatch> by_step ABSL_GUARDED_BY(mutex);
};

/// A fake planner of a world of one: registration completes on the
/// `polls_until_complete`-th call, every plan runs all sequences in one
/// micro-batch on rank 0, and every other call succeeds.
void ProgramPlanner(FakePlannerClient& planner, int polls_until_complete) {
  auto polls = std::make_shared<std::atomic<int>>(0);
  planner.register_worker.answer =
      [polls, polls_until_complete](const v1::RegisterWorkerRequest& request)
      -> absl::StatusOr<v1::RegisterWorkerResponse> {
    v1::RegisterWorkerResponse response;
    response.set_first_rank(0);
    response.set_num_ranks(1);
    response.set_world_size(1);
    const bool complete = ++*polls >= polls_until_complete;
    response.set_world_complete(complete);
    if (!complete) response.set_waiting_for("0 of 1 nodes, 0 of 1 ranks");
    response.set_rendezvous_address(request.address());
    *response.mutable_model() = ModelSpecToProto(*ModelPreset("tiny"));
    *response.mutable_cluster() = ClusterSpecToProto(OneRankCluster());
    return response;
  };
  planner.get_cluster_model.answer = [](const v1::GetClusterModelRequest&)
      -> absl::StatusOr<v1::GetClusterModelResponse> {
    return TinyClusterModel(/*using_default_params=*/true,
                            /*params_version=*/0);
  };
  planner.submit_profile.answer = [](const v1::SubmitProfileRequest&)
      -> absl::StatusOr<v1::SubmitProfileResponse> {
    return v1::SubmitProfileResponse();
  };
  // Batches by step, as submitted or sent with GetPlan.
  auto batches = std::make_shared<SubmittedBatches>();
  planner.submit_batches.answer =
      [batches](const v1::SubmitBatchesRequest& request)
      -> absl::StatusOr<v1::SubmitBatchesResponse> {
    absl::MutexLock lock(&batches->mutex);
    for (const v1::GlobalBatch& batch : request.batches()) {
      batches->by_step[batch.step()] = batch;
    }
    v1::SubmitBatchesResponse response;
    response.set_accepted(request.batches_size());
    return response;
  };
  planner.get_plan.answer = [batches](const v1::GetPlanRequest& request)
      -> absl::StatusOr<v1::GetPlanResponse> {
    v1::GlobalBatch batch = request.batch();
    {
      absl::MutexLock lock(&batches->mutex);
      if (batch.samples_size() == 0) {
        auto known = batches->by_step.find(request.step());
        if (known == batches->by_step.end()) {
          return absl::FailedPreconditionError(
              absl::StrCat("step ", request.step(), " is unknown"));
        }
        batch = known->second;
      }
      batches->by_step[batch.step()] = batch;
    }
    return OneMicroBatchPlan(batch, /*params_version=*/1);
  };
  planner.report_step_stats.answer = [](const v1::ReportStepStatsRequest&)
      -> absl::StatusOr<v1::ReportStepStatsResponse> {
    return v1::ReportStepStatsResponse();
  };
}

/// Options for a quick run of the tiny model: small batches, a small
/// profile, output captured in `lines`.
WorkerAgentOptions QuickOptions(std::vector<std::string>* printed,
                                std::vector<std::string>* logged) {
  WorkerAgentOptions options;
  options.worker_id = "worker-a";
  options.node_name = "node-a";
  options.store_host = "127.0.0.1";
  options.steps = 3;
  options.workload = "longtail:median=32,max=256,min=8,tail_min=128";
  options.batch = BatchOptions{/*global_batch_tokens=*/512,
                               /*global_batch_samples=*/0};
  options.collective_timeout = absl::Seconds(20);
  options.profile_options.repeats = 1;
  options.profile_options.warmup = 0;
  options.profile_options.gemm_tokens = {8, 64};
  options.profile_options.attention_lengths = {16, 64};
  options.sleep = [](absl::Duration) {};
  options.print = [printed](const std::string& line) {
    printed->push_back(line);
  };
  options.log = [logged](const std::string& line) { logged->push_back(line); };
  return options;
}

/// A group of one rank whose all-reduces fail with DEADLINE_EXCEEDED after
/// the first `successes`.
class TimingOutGroup final : public CommGroup {
 public:
  explicit TimingOutGroup(int successes) : successes_(successes) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<int>& global_ranks() const override { return ranks_; }
  absl::Status AllToAll(const torch::Tensor& input, torch::Tensor& output,
                        absl::Duration) override {
    output.copy_(input);
    return absl::OkStatus();
  }
  absl::Status AllReduceSum(torch::Tensor&, absl::Duration timeout) override {
    if (successes_-- > 0) return absl::OkStatus();
    return absl::DeadlineExceededError(absl::StrCat(
        "AllReduceSum timed out after ", absl::FormatDuration(timeout)));
  }
  absl::Status Barrier(absl::Duration) override { return absl::OkStatus(); }

 private:
  int successes_;
  std::vector<int> ranks_ = {0};
};

CommunicatorFactory FakeWorld() {
  return
      [](const C10dOptions&) -> absl::StatusOr<std::unique_ptr<Communicator>> {
        return std::unique_ptr<Communicator>(new FakeCommunicator());
      };
}

/// A fake planner, not programmed yet, and QuickOptions for it, output
/// captured. Not copyable (the options point at the output).
struct ScriptedAgentRun {
  ScriptedAgentRun() { options = QuickOptions(&printed, &logged); }
  ScriptedAgentRun(const ScriptedAgentRun&) = delete;
  ScriptedAgentRun& operator=(const ScriptedAgentRun&) = delete;

  /// A WorkerAgent over `planner` and `options` as they are now, run once.
  absl::StatusOr<AgentRunResult> Run(const Clock& clock = RealClock::Get(),
                                     WorkerMetrics* metrics = nullptr) {
    return WorkerAgent(planner, options, clock, metrics).Run();
  }

  FakePlannerClient planner;
  std::vector<std::string> printed;
  std::vector<std::string> logged;
  WorkerAgentOptions options;
};

/// A ScriptedAgentRun whose planner ProgramPlanner programmed (the world
/// complete at the first poll), without profiling, on the fake one-rank
/// world.
struct QuickRun : ScriptedAgentRun {
  QuickRun() {
    ProgramPlanner(planner, /*polls_until_complete=*/1);
    options.profile = false;
    options.create_communicator = FakeWorld();
  }
};

RunSummary ReadSummary(const std::string& path) {
  absl::StatusOr<RunSummary> summary = ReadRunSummary(path);
  EXPECT_TRUE(summary.ok()) << summary.status();
  return summary.ok() ? *std::move(summary) : RunSummary();
}

TEST(WorkerAgentTest, RegistersPollsProfilesPlansAndReports) {
  ScriptedAgentRun run;
  ProgramPlanner(run.planner, /*polls_until_complete=*/3);
  const std::string dir = TestDir("flow");
  run.options.summary_file = dir + "/summary.json";
  PrometheusWorkerMetrics metrics;
  // The real c10d world of one: rank 0 hosts the store at its announced
  // address.
  absl::StatusOr<AgentRunResult> result = run.Run(RealClock::Get(), &metrics);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->rank, 0);
  EXPECT_EQ(result->world_size, 1);
  EXPECT_EQ(result->next_step, 3);
  EXPECT_FALSE(result->stopped_on_request);

  // Polled until the world was complete, with the same request each time.
  const std::vector<v1::RegisterWorkerRequest> registrations =
      run.planner.register_worker.requests();
  ASSERT_THAT(registrations, SizeIs(3));
  EXPECT_EQ(registrations[0].worker_id(), "worker-a");
  EXPECT_EQ(registrations[0].node_name(), "node-a");
  EXPECT_EQ(registrations[0].num_ranks(), 1);
  EXPECT_EQ(registrations[0].backend(), "gloo");
  // Gloo's groups cost no GPU memory: its cache is unbounded by default.
  EXPECT_EQ(registrations[0].max_cached_groups(), 0);
  EXPECT_TRUE(absl::StartsWith(registrations[0].address(), "127.0.0.1:"));
  EXPECT_EQ(registrations[2].SerializeAsString(),
            registrations[0].SerializeAsString());
  bool logged_wait = false;
  for (const std::string& line : run.logged) {
    logged_wait |= absl::StrContains(
        line, "waiting for the world: 0 of 1 nodes, 0 of 1 ranks");
  }
  EXPECT_TRUE(logged_wait);

  // Profiled and submitted its own samples; printed the fit.
  ASSERT_THAT(run.planner.submit_profile.requests(), SizeIs(1));
  EXPECT_EQ(run.planner.submit_profile.requests()[0].worker_id(), "worker-a");
  EXPECT_GT(run.planner.submit_profile.requests()[0].samples_size(), 0);
  EXPECT_THAT(
      run.printed,
      testing::Contains(HasSubstr("fit gemm: 4 samples, rms error 5.0%")));

  // One plan per step; rank 0 submitted each batch ahead.
  const std::vector<v1::GetPlanRequest> plans = run.planner.get_plan.requests();
  ASSERT_THAT(plans, SizeIs(3));
  const std::vector<v1::SubmitBatchesRequest> submitted =
      run.planner.submit_batches.requests();
  ASSERT_THAT(submitted, SizeIs(3));
  for (int step = 0; step < 3; ++step) {
    // By step with the fingerprint of the batch submitted ahead.
    EXPECT_EQ(plans[step].step(), step);
    EXPECT_EQ(plans[step].worker_id(), "worker-a");
    EXPECT_EQ(plans[step].batch().samples_size(), 0);
    EXPECT_EQ(submitted[step].batches(0).step(), step);
    EXPECT_GT(submitted[step].batches(0).samples_size(), 0);
    EXPECT_EQ(plans[step].batch_fingerprint(),
              BatchFingerprint(submitted[step].batches(0)));
  }
  // Consecutive sample ids: the batches are the stream's, in order.
  const v1::GlobalBatch& first = submitted[0].batches(0);
  EXPECT_EQ(submitted[1].batches(0).samples(0).id(),
            first.samples(first.samples_size() - 1).id() + 1);

  // One report per step with this rank's micro-batch.
  const std::vector<v1::ReportStepStatsRequest> reports =
      run.planner.report_step_stats.requests();
  ASSERT_THAT(reports, SizeIs(3));
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(reports[step].step(), step);
    EXPECT_EQ(reports[step].rank(), 0);
    EXPECT_GT(reports[step].step_seconds(), 0);
    ASSERT_EQ(reports[step].micro_batches_size(), 1);
    EXPECT_GT(reports[step].micro_batches(0).compute_seconds(), 0);
    EXPECT_EQ(reports[step].micro_batches(0).peak_memory_bytes(), 0);
  }

  // One line per step, and the summary.
  std::vector<std::string> step_lines;
  for (const std::string& line : run.printed) {
    if (absl::StartsWith(line, "step ")) step_lines.push_back(line);
  }
  ASSERT_THAT(step_lines, SizeIs(3));
  EXPECT_THAT(step_lines[0],
              AllOf(HasSubstr("step 0: plan SP[1] mb[1] recompute[0] | "
                              "predicted 0.500 s measured "),
                    HasSubstr(" | loss ")));
  const RunSummary summary = ReadSummary(run.options.summary_file);
  EXPECT_EQ(summary.plan_source, "planner");
  ASSERT_EQ(summary.steps.size(), 3u);
  EXPECT_EQ(summary.steps[2].plan_shape, "SP[1] mb[1] recompute[0]");
  EXPECT_DOUBLE_EQ(summary.steps[0].loss, result->steps[0].loss);
  // The loss of the tiny model on the synthetic data starts near ln(256).
  EXPECT_NEAR(result->steps[0].loss, 5.55, 0.2);

  // The Prometheus metrics of the last step.
  const std::string text =
      prometheus::TextSerializer().Serialize(metrics.registry()->Collect());
  EXPECT_THAT(text, HasSubstr("dcp_worker_step_seconds{rank=\"0\"}"));
  EXPECT_THAT(text, HasSubstr("dcp_worker_loss{rank=\"0\"}"));
  EXPECT_THAT(text, HasSubstr("dcp_worker_peak_memory_bytes{rank=\"0\"} 0"));
  // The token counter: the only rank processed every token of the 3 steps.
  int64_t submitted_tokens = 0;
  for (const v1::SubmitBatchesRequest& request : submitted) {
    for (const v1::Sample& sample : request.batches(0).samples()) {
      submitted_tokens += sample.length_tokens();
    }
  }
  double counted_tokens = -1;
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.name != worker_metric_names::kTokensTotal) continue;
    ASSERT_EQ(family.type, prometheus::MetricType::Counter);
    ASSERT_THAT(family.metric, SizeIs(1));
    ASSERT_THAT(family.metric[0].label, SizeIs(1));
    EXPECT_EQ(family.metric[0].label[0].name, "rank");
    EXPECT_EQ(family.metric[0].label[0].value, "0");
    counted_tokens = family.metric[0].counter.value;
  }
  EXPECT_GT(submitted_tokens, 0);
  EXPECT_EQ(counted_tokens, static_cast<double>(submitted_tokens)) << text;
}

TEST(WorkerAgentTest, BucketPlansComeFromTheClusterModel) {
  QuickRun run;
  run.options.steps = 2;
  run.options.plan_source = PlanSource::kPeer;
  absl::StatusOr<AgentRunResult> result = run.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  const FakePlannerClient& planner = run.planner;
  ASSERT_THAT(result->steps, SizeIs(2));
  // One sequence per micro-batch on the only rank.
  EXPECT_THAT(result->steps[0].sp_sizes, ElementsAre(1));
  EXPECT_GT(result->steps[0].micro_batches[0], 1);
  EXPECT_GT(result->steps[0].predicted_seconds, 0);
  EXPECT_THAT(planner.get_plan.requests(), SizeIs(0));
  EXPECT_THAT(planner.report_step_stats.requests(), SizeIs(0));
  EXPECT_THAT(planner.submit_profile.requests(), SizeIs(0));
}

TEST(WorkerAgentTest, AsksWithTheBatchWhenThePlannerDoesNotKnowTheStep) {
  QuickRun run;
  // Submitting ahead fails (only a warning), so no step is known by number.
  run.planner.submit_batches.answer = [](const v1::SubmitBatchesRequest&)
      -> absl::StatusOr<v1::SubmitBatchesResponse> {
    return absl::UnavailableError("planner restarting");
  };
  run.options.steps = 2;
  absl::StatusOr<AgentRunResult> result = run.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<v1::GetPlanRequest> requests =
      run.planner.get_plan.requests();
  ASSERT_THAT(requests, SizeIs(4));
  for (int step = 0; step < 2; ++step) {
    const v1::GetPlanRequest& by_step = requests[2 * step];
    const v1::GetPlanRequest& with_batch = requests[2 * step + 1];
    EXPECT_EQ(by_step.step(), step);
    EXPECT_EQ(by_step.batch().samples_size(), 0);
    EXPECT_EQ(with_batch.batch().step(), step);
    EXPECT_GT(with_batch.batch().samples_size(), 0);
    EXPECT_EQ(with_batch.batch_fingerprint(),
              BatchFingerprint(with_batch.batch()));
  }
  EXPECT_THAT(
      run.logged,
      testing::Contains(HasSubstr("warning: SubmitBatches of step 1 failed")));
}

TEST(WorkerAgentTest, RefusesAPlanThatDropsOrRepeatsASequence) {
  for (const bool repeat : {false, true}) {
    QuickRun run;
    // The programmed plan, with its last sequence dropped or planned twice.
    auto valid = run.planner.get_plan.answer;
    run.planner.get_plan.answer = [valid,
                                   repeat](const v1::GetPlanRequest& request)
        -> absl::StatusOr<v1::GetPlanResponse> {
      absl::StatusOr<v1::GetPlanResponse> response = valid(request);
      if (!response.ok()) return response;
      auto* indices = response->mutable_plan()
                          ->mutable_groups(0)
                          ->mutable_micro_batches(0)
                          ->mutable_sequence_indices();
      if (repeat) {
        indices->Add(indices->Get(0));
      } else {
        indices->RemoveLast();
      }
      return response;
    };
    absl::StatusOr<AgentRunResult> result = run.Run();
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(result.status().message(),
                AllOf(HasSubstr("the plan of step 0"),
                      HasSubstr(repeat ? "is planned twice"
                                       : "are in no micro-batch")));
  }
}

// A plan that re-groups the ranks in phases runs end to end: the same
// micro-batches in two phases train exactly as in one layout, and the step
// record, the reports and the timing files say what ran.
TEST(WorkerAgentTest, RunsAPlanOfPhasesWithTheLossesOfOneLayout) {
  std::vector<RunSummary> summaries;
  std::vector<std::vector<v1::ReportStepStatsRequest>> reports;
  for (const bool phased : {false, true}) {
    QuickRun run;
    const std::string dir = TestDir(phased ? "phased" : "one_layout");
    run.options.summary_file = dir + "/summary.json";
    auto known = run.planner.get_plan.answer;
    run.planner.get_plan.answer = [known,
                                   phased](const v1::GetPlanRequest& request)
        -> absl::StatusOr<v1::GetPlanResponse> {
      absl::StatusOr<v1::GetPlanResponse> one = known(request);
      if (!one.ok()) return one;
      v1::GlobalBatch batch;
      batch.set_step(request.step());
      for (int64_t id : one->sample_ids()) batch.add_samples()->set_id(id);
      return TwoHalvesPlan(batch, /*params_version=*/1, phased);
    };
    absl::StatusOr<AgentRunResult> result = run.Run();
    ASSERT_TRUE(result.ok()) << result.status();
    summaries.push_back(ReadSummary(run.options.summary_file));
    reports.push_back(run.planner.report_step_stats.requests());
    // Rank timings every step; the one-layout plan file only without phases.
    const std::string timings = StepTimingDir(run.options.summary_file);
    absl::StatusOr<RankStepTiming> timing =
        ReadRankStepTiming(timings, /*step=*/2, /*rank=*/0);
    ASSERT_TRUE(timing.ok()) << timing.status();
    EXPECT_THAT(timing->micro_batches, SizeIs(2));
    EXPECT_EQ(ReadStepPlanFile(timings, 2).ok(), !phased);
  }
  const RunSummary& one_layout = summaries[0];
  const RunSummary& phased = summaries[1];
  ASSERT_THAT(one_layout.steps, SizeIs(3));
  ASSERT_THAT(phased.steps, SizeIs(3));
  for (int step = 0; step < 3; ++step) {
    EXPECT_NEAR(phased.steps[step].loss, one_layout.steps[step].loss,
                1e-6 * std::abs(one_layout.steps[step].loss))
        << "step " << step;
    EXPECT_EQ(one_layout.steps[step].plan_shape, "SP[1] mb[2] recompute[0]");
    EXPECT_EQ(phased.steps[step].plan_shape,
              "phases 2: SP[1] mb[1] recompute[0] then SP[1] mb[1] "
              "recompute[0]");
    EXPECT_EQ(phased.steps[step].predicted_seconds, 0.6);
    EXPECT_THAT(phased.steps[step].sp_sizes, ElementsAre(1, 1));
  }
  // Reported per micro-batch, phase after phase.
  for (int run = 0; run < 2; ++run) {
    ASSERT_THAT(reports[run], SizeIs(3));
    const v1::ReportStepStatsRequest& last = reports[run].back();
    ASSERT_EQ(last.micro_batches_size(), 2);
    for (int m = 0; m < 2; ++m) {
      EXPECT_EQ(last.micro_batches(m).micro_batch_index(), m);
      EXPECT_EQ(last.micro_batches(m).phase(), run == 1 ? m : 0);
    }
  }
}

TEST(WorkerAgentTest, AFailedCheckpointStopsTheRunAFailedSummaryDoesNot) {
  const std::string dir = TestDir("io_failures");
  WriteTestFile(dir + "/a-file", "not a directory");
  QuickRun run;
  run.options.steps = 2;
  // Neither can be written: a-file is a file.
  run.options.summary_file = dir + "/a-file/summary.json";
  absl::StatusOr<AgentRunResult> result = run.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(
      run.logged,
      testing::Contains(HasSubstr("warning: the run summary was not written")));

  run.options.summary_file = "";
  run.options.checkpoint_dir = dir + "/a-file/checkpoints";
  result = run.Run();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(result.status().message(),
              HasSubstr("checkpoint write failed on rank 0: cannot create "
                        "the checkpoint directory"));
}

/// A run stopped after step 1 with a checkpoint and resumed has the plans
/// and losses of an uninterrupted one, in `precision` with or without
/// ZeRO-1; returns the options of the resumed run.
WorkerAgentOptions ExpectResumedRunMatchesAnUninterruptedOne(
    TrainingPrecision precision, bool zero1, const std::string& name,
    std::vector<std::string>* printed, std::vector<std::string>* logged) {
  const std::string dir = TestDir(name);

  // Uninterrupted: 4 steps.
  FakePlannerClient planner;
  ProgramPlanner(planner, /*polls_until_complete=*/1);
  WorkerAgentOptions options = QuickOptions(printed, logged);
  options.precision = precision;
  options.zero1 = zero1;
  options.profile = false;
  options.steps = 4;
  options.create_communicator = FakeWorld();
  options.summary_file = dir + "/uninterrupted.json";
  absl::StatusOr<AgentRunResult> whole = WorkerAgent(planner, options).Run();
  EXPECT_TRUE(whole.ok()) << whole.status();

  // Asked to stop during step 1: stops after it, with a checkpoint.
  FakePlannerClient first_planner;
  ProgramPlanner(first_planner, /*polls_until_complete=*/1);
  options.checkpoint_dir = dir + "/checkpoints";
  options.summary_file = dir + "/first.json";
  auto polls = std::make_shared<int>(0);
  options.stop_requested = [polls] { return ++*polls >= 2; };
  absl::StatusOr<AgentRunResult> first =
      WorkerAgent(first_planner, options).Run();
  EXPECT_TRUE(first.ok()) << first.status();
  if (!first.ok()) return options;
  EXPECT_TRUE(first->stopped_on_request);
  EXPECT_EQ(first->next_step, 2);
  EXPECT_TRUE(std::filesystem::exists(CheckpointPath(options.checkpoint_dir)));

  // Resumed: steps 2 and 3.
  FakePlannerClient second_planner;
  ProgramPlanner(second_planner, /*polls_until_complete=*/1);
  options.resume = true;
  options.stop_requested = nullptr;
  options.summary_file = dir + "/resumed.json";
  absl::StatusOr<AgentRunResult> resumed =
      WorkerAgent(second_planner, options).Run();
  EXPECT_TRUE(resumed.ok()) << resumed.status();
  if (!resumed.ok()) return options;
  EXPECT_EQ(resumed->first_step, 2);
  EXPECT_EQ(resumed->next_step, 4);
  EXPECT_EQ(second_planner.get_plan.requests().size(), 2u);
  if (second_planner.get_plan.requests().size() != 2u ||
      planner.get_plan.requests().size() < 3u) {
    return options;
  }
  EXPECT_EQ(second_planner.get_plan.requests()[0].step(), 2);
  EXPECT_EQ(second_planner.get_plan.requests()[0].batch_fingerprint(),
            planner.get_plan.requests()[2].batch_fingerprint());

  const RunSummary expected = ReadSummary(dir + "/uninterrupted.json");
  const RunSummary before = ReadSummary(dir + "/first.json");
  const RunSummary after = ReadSummary(dir + "/resumed.json");
  EXPECT_EQ(expected.steps.size(), 4u);
  EXPECT_EQ(before.steps.size(), 2u);
  EXPECT_EQ(after.steps.size(), 2u);
  if (expected.steps.size() != 4u || before.steps.size() != 2u ||
      after.steps.size() != 2u) {
    return options;
  }
  for (int step = 0; step < 4; ++step) {
    const StepRecord& got =
        step < 2 ? before.steps[step] : after.steps[step - 2];
    EXPECT_EQ(got.step, step);
    EXPECT_EQ(got.plan_shape, expected.steps[step].plan_shape);
    EXPECT_EQ(got.loss, expected.steps[step].loss) << "step " << step;
  }
  return options;
}

TEST(WorkerAgentTest, ResumedRunMatchesAnUninterruptedOne) {
  std::vector<std::string> printed;
  std::vector<std::string> logged;
  ExpectResumedRunMatchesAnUninterruptedOne(TrainingPrecision::kFp32,
                                            /*zero1=*/false, "resume", &printed,
                                            &logged);
}

// bf16 with ZeRO-1: the checkpoint holds the float32 master weights and
// AdamW moments. Resuming it in fp32 is refused, naming both settings.
TEST(WorkerAgentTest, ResumedBf16Zero1RunMatchesAndOtherSettingsAreRefused) {
  std::vector<std::string> printed;
  std::vector<std::string> logged;
  WorkerAgentOptions options = ExpectResumedRunMatchesAnUninterruptedOne(
      TrainingPrecision::kBf16, /*zero1=*/true, "resume_bf16_zero1", &printed,
      &logged);
  FakePlannerClient planner;
  ProgramPlanner(planner, /*polls_until_complete=*/1);
  options.precision = TrainingPrecision::kFp32;
  options.zero1 = false;
  absl::StatusOr<AgentRunResult> refused = WorkerAgent(planner, options).Run();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr("was written with --precision=bf16 --zero1"),
                    HasSubstr("this run has --precision=fp32 without --zero1"),
                    HasSubstr("resume with --precision=bf16")));
}

TEST(WorkerAgentTest, PlannerUnavailableIsAClearError) {
  ScriptedAgentRun run;
  run.planner.register_worker.answer = [](const v1::RegisterWorkerRequest&)
      -> absl::StatusOr<v1::RegisterWorkerResponse> {
    return absl::UnavailableError(
        "planner at dcp-planner:50051 unavailable after 5 attempts over 6.2 "
        "s: failed to connect");
  };
  absl::StatusOr<AgentRunResult> result = run.Run();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(result.status().message(),
              AllOf(HasSubstr("registering worker \"worker-a\""),
                    HasSubstr("planner at dcp-planner:50051 unavailable")));
}

TEST(WorkerAgentTest, IncompleteWorldTimesOutSayingWhatIsMissing) {
  ScriptedAgentRun run;
  ProgramPlanner(run.planner, /*polls_until_complete=*/1 << 30);
  FakeClock clock;
  run.options.world_timeout = absl::Minutes(1);
  std::vector<absl::Duration> waits;
  run.options.sleep = [&clock, &waits](absl::Duration duration) {
    waits.push_back(duration);
    clock.Advance(duration);
  };
  absl::StatusOr<AgentRunResult> result = run.Run(clock);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(result.status().message(),
              AllOf(HasSubstr("did not complete within 1m"),
                    HasSubstr("0 of 1 nodes, 0 of 1 ranks")));
  // Backoff doubling from 100 ms up to 2 s.
  ASSERT_GE(waits.size(), 6u);
  EXPECT_EQ(waits[0], absl::Milliseconds(100));
  EXPECT_EQ(waits[1], absl::Milliseconds(200));
  EXPECT_EQ(waits.back(), absl::Seconds(2));
  // The wait is logged once (the missing part did not change).
  int wait_lines = 0;
  for (const std::string& line : run.logged) {
    wait_lines += absl::StrContains(line, "waiting for the world") ? 1 : 0;
  }
  EXPECT_EQ(wait_lines, 1);
}

TEST(WorkerAgentTest, StopWhileWaitingForTheWorldExitsCleanly) {
  ScriptedAgentRun run;
  ProgramPlanner(run.planner, /*polls_until_complete=*/1 << 30);
  run.options.stop_requested = [] { return true; };
  bool created = false;
  run.options.create_communicator =
      [&created](
          const C10dOptions&) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    created = true;
    return std::unique_ptr<Communicator>(new FakeCommunicator());
  };
  absl::StatusOr<AgentRunResult> result = run.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->stopped_on_request);
  EXPECT_FALSE(created);
  EXPECT_THAT(run.planner.register_worker.requests(), SizeIs(1));
}

TEST(WorkerAgentTest, HungCollectiveFailsTheStepWithTheTimeout) {
  QuickRun run;
  // The first all-reduce (whether to profile) succeeds; step 0's gradient
  // all-reduce times out.
  run.options.create_communicator =
      [](const C10dOptions&) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    return std::unique_ptr<Communicator>(
        new OneGroupCommunicator<TimingOutGroup>(/*successes=*/1));
  };
  absl::StatusOr<AgentRunResult> result = run.Run();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(result.status().message(),
              AllOf(HasSubstr("step 0 on rank 0"),
                    HasSubstr("AllReduceSum timed out after 20s")));
  EXPECT_THAT(run.planner.report_step_stats.requests(), SizeIs(0));
}

TEST(WorkerAgentTest, RejectsBadOptions) {
  ScriptedAgentRun run;
  run.options.resume = true;
  absl::StatusOr<AgentRunResult> result = run.Run();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(run.planner.register_worker.requests(), SizeIs(0));
}

}  // namespace
}  // namespace dcp
