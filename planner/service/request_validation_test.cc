#include "planner/service/request_validation.h"

#include <limits>
#include <string>

#include "absl/status/status.h"
#include "cost_model/memory_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/service/test_batches.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

v1::RegisterWorkerRequest Worker() {
  v1::RegisterWorkerRequest request;
  request.set_worker_id("w0");
  request.set_node_name("node0");
  request.set_num_ranks(8);
  request.set_address("node0:29500");
  request.set_backend("nccl");
  request.set_max_cached_groups(kDefaultNcclMaxCachedGroups);
  return request;
}

v1::GlobalBatch Batch(int64_t step) {
  return BatchOfLengths(step, {100, 101, 102, 103}, /*first_id=*/0);
}

TEST(RequestValidationTest, QuoteAndHexAreShortAndPrintable) {
  EXPECT_EQ(Quote("a\nb"), "'a?b'");
  EXPECT_EQ(Quote(std::string(100, 'x')), "'" + std::string(64, 'x') + "...'");
  EXPECT_EQ(Hex(255), "00000000000000ff");
}

TEST(RequestValidationTest, RegistrationFieldsAreNamed) {
  EXPECT_TRUE(ValidateRegisterWorkerRequest(Worker(), 8).ok());
  v1::RegisterWorkerRequest request = Worker();
  request.set_worker_id("");
  EXPECT_THAT(ValidateRegisterWorkerRequest(request, 8).message(),
              HasSubstr("worker_id is empty"));
  request = Worker();
  request.set_num_ranks(9);
  EXPECT_THAT(ValidateRegisterWorkerRequest(request, 8).message(),
              AllOf(HasSubstr("num_ranks = 9"), HasSubstr("[1, 8]")));
  request = Worker();
  request.set_backend("mpi");
  EXPECT_THAT(ValidateRegisterWorkerRequest(request, 8).message(),
              HasSubstr("backend 'mpi'"));
  request = Worker();
  request.set_address("node0:99999");
  EXPECT_THAT(ValidateRegisterWorkerRequest(request, 8).message(),
              HasSubstr("host:port"));
  request = Worker();
  request.set_job_id("train 7");
  EXPECT_THAT(ValidateRegisterWorkerRequest(request, 8).message(),
              AllOf(HasSubstr("job_id 'train 7'"), HasSubstr("letters")));
  request.set_job_id("train-7");  // an empty job id is allowed too
  EXPECT_TRUE(ValidateRegisterWorkerRequest(request, 8).ok());
  request = Worker();
  request.set_gpu_kind("H\x01");
  EXPECT_THAT(ValidateRegisterWorkerRequest(request, 8).message(),
              HasSubstr("gpu_kind"));
}

TEST(RequestValidationTest, BatchesAndSubmissions) {
  EXPECT_TRUE(ValidateGlobalBatch(Batch(0), "batch").ok());
  v1::GlobalBatch repeated = Batch(1);
  repeated.mutable_samples(2)->set_id(0);
  EXPECT_THAT(ValidateGlobalBatch(repeated, "batches[3]").message(),
              HasSubstr("batches[3].samples[2].id = 0 repeats"));
  v1::SubmitBatchesRequest submit;
  *submit.add_batches() = Batch(0);
  *submit.add_batches() = Batch(1);
  *submit.add_batches() = Batch(0);
  // A batch decides its step: anonymous submissions are refused.
  EXPECT_THAT(ValidateSubmitBatchesRequest(submit).status().message(),
              HasSubstr("worker_id is empty; SubmitBatches decides a step's "
                        "batch and needs the id of a registered worker"));
  submit.set_worker_id("w0");
  submit.set_incarnation("bad incarnation");
  EXPECT_THAT(ValidateSubmitBatchesRequest(submit).status().message(),
              HasSubstr("incarnation 'bad incarnation' contains ' '"));
  submit.set_incarnation("1a2b");
  absl::StatusOr<SubmittedBatches> batches =
      ValidateSubmitBatchesRequest(submit);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(batches->fingerprints.size(), 3u);
  EXPECT_EQ(batches->index_of_step.size(), 2u);
  EXPECT_EQ(batches->index_of_step.at(0), 0);
  submit.mutable_batches(2)->mutable_samples(0)->set_length_tokens(7);
  EXPECT_THAT(ValidateSubmitBatchesRequest(submit).status().message(),
              HasSubstr("both step 0 with different samples"));
}

TEST(RequestValidationTest, GetPlanByBatchAndByStep) {
  v1::GetPlanRequest request;
  *request.mutable_batch() = Batch(3);
  EXPECT_THAT(ValidateGetPlanWithBatch(request, 42).message(),
              HasSubstr("worker_id is empty; GetPlan with a batch decides"));
  request.set_worker_id("w0");
  EXPECT_TRUE(ValidateGetPlanWithBatch(request, 42).ok());
  request.set_step(4);
  EXPECT_THAT(ValidateGetPlanWithBatch(request, 42).message(),
              HasSubstr("step = 4 but batch.step = 3"));
  request.set_step(0);
  request.set_batch_fingerprint(41);
  EXPECT_THAT(ValidateGetPlanWithBatch(request, 42).message(),
              HasSubstr("batch_fingerprint = 0000000000000029"));
  v1::GetPlanRequest by_step;
  // Asking by step only reads: it may be anonymous.
  by_step.set_step(2);
  EXPECT_TRUE(ValidateGetPlanByStep(by_step).ok());
  by_step.set_step(-1);
  EXPECT_THAT(ValidateGetPlanByStep(by_step).message(),
              HasSubstr("steps are numbered from 0"));
}

TEST(RequestValidationTest, ATrainingStateIsDeclaredWholeAndKnown) {
  v1::RegisterWorkerRequest request;
  request.set_worker_id("w0");
  request.set_node_name("n0");
  request.set_num_ranks(1);
  EXPECT_TRUE(ValidateRegisterWorkerRequest(request, 8).ok());
  request.set_precision("bf16");
  EXPECT_THAT(ValidateRegisterWorkerRequest(request, 8).message(),
              HasSubstr("declare both (the training state they make)"));
  request.set_optimizer_sharding("zero1");
  EXPECT_TRUE(ValidateRegisterWorkerRequest(request, 8).ok());
  request.set_precision("fp16");
  EXPECT_THAT(ValidateRegisterWorkerRequest(request, 8).message(),
              HasSubstr("precision 'fp16' for worker 'w0' is not supported"));
  request.set_precision("fp32");
  request.set_optimizer_sharding("zero3");
  EXPECT_TRUE(ValidateRegisterWorkerRequest(request, 8).ok());
  request.set_optimizer_sharding("zero2");
  EXPECT_THAT(ValidateRegisterWorkerRequest(request, 8).message(),
              HasSubstr("optimizer_sharding 'zero2' for worker 'w0' is not "
                        "supported; use \"none\", \"zero1\" or \"zero3\""));
}

TEST(RequestValidationTest, StepReports) {
  v1::ReportStepStatsRequest request;
  request.set_worker_id("w0");
  request.set_step(2);
  request.set_rank(3);
  request.set_step_seconds(1.5);
  EXPECT_TRUE(ValidateReportStepStatsRequest(request, 4).ok());
  EXPECT_THAT(ValidateReportStepStatsRequest(request, 3).message(),
              HasSubstr("ranks are 0..2"));
  v1::MicroBatchStats* stats = request.add_micro_batches();
  stats->set_compute_seconds(std::numeric_limits<double>::infinity());
  EXPECT_THAT(ValidateReportStepStatsRequest(request, 4).message(),
              HasSubstr("micro_batches[0].compute_seconds"));
  stats->set_compute_seconds(1);
  *request.add_micro_batches() = *stats;
  EXPECT_THAT(ValidateReportStepStatsRequest(request, 4).message(),
              HasSubstr("repeats an earlier entry"));
}

TEST(RequestValidationTest, StepTimesMustBePhysicallyPossible) {
  v1::ReportStepStatsRequest request;
  request.set_worker_id("w0");
  request.set_step(2);
  request.set_rank(0);
  for (const double seconds :
       {1e300, kMaxStepSeconds * 2, std::numeric_limits<double>::quiet_NaN(),
        -1.0, 0.0, std::numeric_limits<double>::infinity()}) {
    request.set_step_seconds(seconds);
    const absl::Status status = ValidateReportStepStatsRequest(request, 4);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << seconds;
    EXPECT_THAT(status.message(), HasSubstr("step_seconds")) << seconds;
  }
  request.set_step_seconds(kMaxStepSeconds);
  EXPECT_TRUE(ValidateReportStepStatsRequest(request, 4).ok());
  // A micro-batch cannot take longer than a step may.
  request.set_step_seconds(2.0);
  request.add_micro_batches()->set_compute_seconds(1e300);
  EXPECT_THAT(ValidateReportStepStatsRequest(request, 4).message(),
              HasSubstr("micro_batches[0].compute_seconds = 1e+300"));
}

TEST(RequestValidationTest, Profiles) {
  v1::SubmitProfileRequest request;
  request.set_worker_id("w0");
  EXPECT_THAT(ValidateSubmitProfileRequest(request).message(),
              HasSubstr("samples is empty"));
}

}  // namespace
}  // namespace dcp
