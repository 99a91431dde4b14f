#include "planner/service/planner_state_store.h"

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

v1::JobRecord Job() {
  v1::JobRecord job;
  job.mutable_model()->set_name("tiny");
  job.mutable_cluster()->set_num_nodes(2);
  job.set_batch_fingerprint_version(2);
  return job;
}

TEST(PlannerStateStoreTest, RecordsRoundTripOneFileEach) {
  const std::string directory = FreshTestDirectory("planner_state_store_");
  {
    PlannerState state;
    auto store = PlannerStateStore::Open(directory, Job(), &state);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_TRUE(state.workers.empty());
    for (int rank : {0, 8}) {
      v1::WorkerRecord worker;
      worker.mutable_registration()->set_worker_id(absl::StrCat("w", rank));
      worker.set_first_rank(rank);
      ASSERT_TRUE((*store)->WriteWorker(worker).ok());
    }
    v1::ParamsVersionRecord version;
    version.set_params_version(1);
    version.set_compute_correction(1.5);
    ASSERT_TRUE((*store)->WriteParamsVersion(version).ok());
    v1::SubmitProfileRequest profile;
    profile.set_worker_id("w0");
    ASSERT_TRUE((*store)->WriteProfile(0, profile).ok());
    for (int64_t step = 0; step < 3; ++step) {
      v1::StepRecord record;
      record.set_step(step);
      record.set_fingerprint(100 + step);
      ASSERT_TRUE((*store)->WriteStep(record).ok());
    }
    v1::CompactedStepsRecord compacted;
    v1::StepVersionRange* range = compacted.add_ranges();
    range->set_first_step(0);
    range->set_last_step(1);
    range->set_params_version(0);
    ASSERT_TRUE((*store)->CompactSteps(compacted, {0, 1}).ok());
  }
  EXPECT_EQ(CountFilesWithPrefix(directory, "worker_"), 2);
  EXPECT_EQ(CountFilesWithPrefix(directory, "step_"), 1);
  PlannerState state;
  auto store = PlannerStateStore::Open(directory, Job(), &state);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_EQ(state.workers.size(), 2u);
  EXPECT_EQ(state.workers[1].registration().worker_id(), "w8");
  ASSERT_EQ(state.params_versions.size(), 1u);
  EXPECT_EQ(state.params_versions.at(1).compute_correction(), 1.5);
  ASSERT_EQ(state.profiles.size(), 1u);
  EXPECT_EQ(state.profiles[0].worker_id(), "w0");
  ASSERT_EQ(state.steps.size(), 1u);
  EXPECT_EQ(state.steps[0].fingerprint(), 102u);
  ASSERT_EQ(state.compacted_steps.ranges_size(), 1);
  EXPECT_EQ(state.compacted_steps.ranges(0).last_step(), 1);
}

TEST(PlannerStateStoreTest, StepPlansAndReportsLeaveWithTheirStep) {
  const std::string directory = FreshTestDirectory("planner_state_store_");
  PlannerState state;
  auto store = PlannerStateStore::Open(directory, Job(), &state);
  ASSERT_TRUE(store.ok()) << store.status();
  for (int64_t step = 0; step < 4; ++step) {
    v1::StepRecord record;
    record.set_step(step);
    ASSERT_TRUE((*store)->WriteStep(record).ok());
    v1::StepPlanRecord plan;
    plan.set_step(step);
    plan.add_lengths_tokens(100 + step);
    ASSERT_TRUE((*store)->WriteStepPlan(plan).ok());
    v1::StepReportsRecord reports;
    reports.set_step(step);
    reports.add_ranks()->set_rank(0);
    ASSERT_TRUE((*store)->WriteStepReports(reports).ok());
  }
  // A report recorded as its step left the window: no step record.
  v1::StepReportsRecord orphan;
  orphan.set_step(9);
  ASSERT_TRUE((*store)->WriteStepReports(orphan).ok());
  EXPECT_EQ(CountFilesWithPrefix(directory, "plan_"), 4);
  EXPECT_EQ(CountFilesWithPrefix(directory, "reports_"), 5);

  ASSERT_TRUE((*store)->DeleteStep(3).ok());
  v1::CompactedStepsRecord compacted;
  v1::StepVersionRange* range = compacted.add_ranges();
  range->set_first_step(0);
  range->set_last_step(0);
  ASSERT_TRUE((*store)->CompactSteps(compacted, {0}).ok());
  for (const char* prefix : {"step_", "plan_", "reports_"}) {
    EXPECT_EQ(CountFilesWithPrefix(directory, prefix), 2) << prefix;
  }
  for (int64_t step : {1, 2}) {
    EXPECT_TRUE(std::filesystem::exists(
        absl::StrFormat("%s/plan_%020d.pb", directory, step)));
  }
  store->reset();
  // The planner reads none of them back, and opens the directory as before.
  PlannerState reopened;
  ASSERT_TRUE(PlannerStateStore::Open(directory, Job(), &reopened).ok());
  EXPECT_EQ(reopened.steps.size(), 2u);
}

TEST(PlannerStateStoreTest, ForeignAndOldDirectoriesAreRefused) {
  const std::string directory = FreshTestDirectory("planner_state_store_");
  PlannerState state;
  {
    auto store = PlannerStateStore::Open(directory, Job(), &state);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->RecordJob().ok());
  }
  v1::JobRecord other = Job();
  other.mutable_cluster()->set_num_nodes(3);
  absl::Status refused =
      PlannerStateStore::Open(directory, other, &state).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("different job"));
  v1::JobRecord version = Job();
  version.set_batch_fingerprint_version(3);
  EXPECT_THAT(
      PlannerStateStore::Open(directory, version, &state).status().message(),
      HasSubstr("batch fingerprints of version 2"));

  const std::string legacy =
      FreshTestDirectory("planner_state_store_") + "_json";
  std::filesystem::create_directories(legacy);
  WriteTestFile(legacy + "/job.json", "{}");
  absl::Status old = PlannerStateStore::Open(legacy, Job(), &state).status();
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.message(), HasSubstr("start with a fresh state_dir"));
}

// A fresh directory is claimed for its job (job.pb) only with its first
// record or RecordJob(): a planner whose start failed after opening it used
// to leave job.pb behind, and the corrected configuration was refused.
TEST(PlannerStateStoreTest, FreshDirectoryIsClaimedOnlyOnceUsed) {
  const std::string directory = FreshTestDirectory("planner_state_store_");
  v1::JobRecord wrong = Job();
  wrong.mutable_cluster()->set_num_nodes(3);
  {
    PlannerState state;
    ASSERT_TRUE(PlannerStateStore::Open(directory, wrong, &state).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(directory + "/job.pb"));
  {
    PlannerState state;
    auto store = PlannerStateStore::Open(directory, Job(), &state);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_FALSE(std::filesystem::exists(directory + "/job.pb"));
    v1::WorkerRecord worker;
    worker.set_first_rank(0);
    ASSERT_TRUE((*store)->WriteWorker(worker).ok());
    EXPECT_TRUE(std::filesystem::exists(directory + "/job.pb"));
    ASSERT_TRUE((*store)->RecordJob().ok());  // already recorded
  }
  PlannerState state;
  EXPECT_EQ(PlannerStateStore::Open(directory, wrong, &state).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(PlannerStateStore::Open(directory, Job(), &state).ok());
}

TEST(PlannerStateStoreTest, CorruptRecordIsNamed) {
  // A worker's record is not recoverable (its ranks would be handed out
  // again): the directory is refused, naming the file.
  const std::string directory = FreshTestDirectory("planner_state_store_");
  {
    PlannerState state;
    ASSERT_TRUE(PlannerStateStore::Open(directory, Job(), &state).ok());
  }
  WriteTestFile(directory + "/worker_000008.pb", "\xff\xff");
  PlannerState state;
  absl::Status status =
      PlannerStateStore::Open(directory, Job(), &state).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("worker_000008.pb"));
}

// A garbled record of a step (a crash, a full disk, a hand edit) used to stop
// the planner from starting: now it is set aside as "<name>.corrupt", said in
// one line, and the step is planned again; the records that parse are kept.
TEST(PlannerStateStoreTest, CorruptStepRecordIsSetAside) {
  const std::string directory = FreshTestDirectory("planner_state_store_");
  {
    PlannerState state;
    auto store = PlannerStateStore::Open(directory, Job(), &state);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int64_t step = 5; step < 10; ++step) {
      v1::StepRecord record;
      record.set_step(step);
      record.set_fingerprint(100 + step);
      ASSERT_TRUE((*store)->WriteStep(record).ok());
    }
  }
  const std::string garbled = "step_00000000000000000007.pb";
  const std::string truncated = "step_00000000000000000009.pb";
  WriteTestFile(directory + "/" + garbled, "\xff\xff");
  // Empty parses (every field at its default) but records step 0.
  WriteTestFile(directory + "/" + truncated, "");
  PlannerState state;
  auto store = PlannerStateStore::Open(directory, Job(), &state);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_EQ(state.steps.size(), 3u);
  EXPECT_EQ(state.steps[0].step(), 5);
  EXPECT_EQ(state.steps[1].step(), 6);
  EXPECT_EQ(state.steps[2].step(), 8);
  EXPECT_EQ(state.steps[2].fingerprint(), 108u);
  ASSERT_EQ(state.set_aside.size(), 2u);
  EXPECT_THAT(state.set_aside[0],
              AllOf(HasSubstr(directory + "/" + garbled),
                    HasSubstr("does not parse as a step record"),
                    HasSubstr(garbled + ".corrupt"),
                    HasSubstr("step 7 will be planned again")));
  EXPECT_THAT(state.set_aside[1],
              AllOf(HasSubstr(truncated), HasSubstr("records step 0"),
                    HasSubstr("step 9 will be planned again")));
  EXPECT_FALSE(std::filesystem::exists(directory + "/" + garbled));
  EXPECT_TRUE(std::filesystem::exists(directory + "/" + garbled + ".corrupt"));
  EXPECT_TRUE(
      std::filesystem::exists(directory + "/" + truncated + ".corrupt"));

  // The step can be recorded again, and the files set aside are not read.
  v1::StepRecord again;
  again.set_step(7);
  again.set_fingerprint(7007);
  ASSERT_TRUE((*store)->WriteStep(again).ok());
  store->reset();
  PlannerState reopened;
  ASSERT_TRUE(PlannerStateStore::Open(directory, Job(), &reopened).ok());
  EXPECT_TRUE(reopened.set_aside.empty());
  ASSERT_EQ(reopened.steps.size(), 4u);
  EXPECT_EQ(reopened.steps[2].fingerprint(), 7007u);
}

TEST(PlannerStateStoreTest, PersistErrorKeepsActionableCodes) {
  EXPECT_EQ(PersistError("x", absl::ResourceExhaustedError("full")).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(PersistError("x", absl::PermissionDeniedError("ro")).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(PersistError("x", absl::InternalError("eio")).code(),
            absl::StatusCode::kUnavailable);
  // The store's error already says what to do (StateStore::Write); it is not
  // followed by a second, vaguer fix.
  const absl::Status full = PersistError(
      "the registration",
      absl::ResourceExhaustedError(
          "writing '/state/worker_000000.pb' failed: No space left on device "
          "(5 attempts over 3.75s); free space in '/state' or point "
          "--state-dir elsewhere"));
  EXPECT_EQ(std::string(full.message()),
            "cannot record the registration durably: writing "
            "'/state/worker_000000.pb' failed: No space left on device (5 "
            "attempts over 3.75s); free space in '/state' or point "
            "--state-dir elsewhere");
}

}  // namespace
}  // namespace dcp
