#include "worker/device_check/device_check.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/fake_clock.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/communication/fake_communicator.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

ModelCase Case(const char* preset, std::vector<int64_t> tokens,
               std::vector<int> checkpointed) {
  ModelCase model_case;
  model_case.spec = *ModelPreset(preset);
  model_case.micro_batch_tokens = std::move(tokens);
  model_case.checkpointed_layers = std::move(checkpointed);
  return model_case;
}

DeviceCheckOptions TinyOptions() {
  DeviceCheckOptions options;
  options.models = {Case("tiny", {16, 48}, {0, 2}),
                    Case("tiny-dit", {16}, {1})};
  options.profile.repeats = 1;
  options.profile.warmup = 0;
  options.profile.gemm_tokens = {1, 8, 32};
  options.profile.attention_lengths = {8, 16, 32};
  options.collective_bytes = {1024};
  options.micro_batch_repeats = 1;
  options.log = [](const std::string&) {};
  return options;
}

/// RunDeviceCheck of `options` on a fake world of one rank, with a clock
/// that steps 1 ms at every reading.
absl::StatusOr<DeviceCheckReport> RunOnOneFakeRank(
    const DeviceCheckOptions& options) {
  FakeCommunicator communicator;
  const SteppingClock clock;
  return RunDeviceCheck(options, communicator, clock);
}

TEST(DeviceCheckTest, RunsEveryMicroBatchOfEveryModel) {
  absl::StatusOr<DeviceCheckReport> report = RunOnOneFakeRank(TinyOptions());
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_THAT(report->rows, SizeIs(5));
  EXPECT_THAT(report->skipped, IsEmpty());
  for (const CheckRow& row : report->rows) {
    EXPECT_GT(row.predicted_seconds, 0) << row.model << " " << row.tokens;
    EXPECT_GT(row.measured_seconds, 0) << row.model << " " << row.tokens;
    EXPECT_GT(row.predicted_peak_bytes, 0) << row.model;
    // The CPU allocation meter measured the peak.
    ASSERT_TRUE(row.measured_peak_bytes.has_value()) << row.model;
    EXPECT_GT(*row.measured_peak_bytes, 0) << row.model;
  }
  EXPECT_EQ(report->rows[1].model, "tiny");
  EXPECT_EQ(report->rows[1].tokens, 16);
  EXPECT_EQ(report->rows[1].checkpointed_layers, 2);
  EXPECT_EQ(report->rows[4].model, "tiny-dit");
  EXPECT_EQ(report->rows[4].checkpointed_layers, 1);
  // Recompute costs time in the model: 2 recomputed layers predict more.
  EXPECT_GT(report->rows[1].predicted_seconds,
            report->rows[0].predicted_seconds);
  ASSERT_THAT(report->fits, SizeIs(2));
  EXPECT_EQ(report->fits[0].first, "tiny");
  // Four collectives of one size.
  ASSERT_THAT(report->collectives, SizeIs(4));
  EXPECT_EQ(report->collectives[1].op, "reduce_scatter");
  EXPECT_EQ(report->collectives[1].bytes, 1024);

  const std::string text = FormatDeviceCheckReport(*report);
  EXPECT_THAT(text,
              AllOf(HasSubstr("fit of tiny:"), HasSubstr("fit of tiny-dit:"),
                    HasSubstr("collectives at world size 1:"),
                    HasSubstr("| tiny-dit | 2 | 16 | 1 | "),
                    HasSubstr("time error over 5 rows: median ")));
}

// Each row reaches on_row as it is measured, with every row before it, so a
// run stopped by its time limit has written what it measured.
TEST(DeviceCheckTest, EachRowIsHandedOutAsItIsMeasured) {
  DeviceCheckOptions options = TinyOptions();
  std::vector<size_t> sizes_seen;
  std::vector<std::string> last_models;
  options.on_row = [&](const std::vector<CheckRow>& rows) {
    sizes_seen.push_back(rows.size());
    last_models.clear();
    for (const CheckRow& row : rows) last_models.push_back(row.model);
  };
  absl::StatusOr<DeviceCheckReport> report = RunOnOneFakeRank(options);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_THAT(report->rows, SizeIs(5));
  EXPECT_EQ(sizes_seen, (std::vector<size_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(last_models, (std::vector<std::string>{"tiny", "tiny", "tiny",
                                                    "tiny", "tiny-dit"}));
}

// One rank needs no collective: without buffer sizes the phase is skipped.
TEST(DeviceCheckTest, NoCollectivesWhenNoneAreAskedFor) {
  DeviceCheckOptions options = TinyOptions();
  options.models = {Case("tiny", {16}, {0})};
  options.collective_bytes = {};
  std::vector<std::string> logged;
  options.log = [&logged](const std::string& line) { logged.push_back(line); };
  absl::StatusOr<DeviceCheckReport> report = RunOnOneFakeRank(options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->collectives, IsEmpty());
  EXPECT_THAT(logged,
              Contains("no collectives at world size 1: one rank needs no "
                       "backend"));
}

TEST(DeviceCheckTest, PhasesPastTheirBudgetSkipWhatIsLeft) {
  DeviceCheckOptions options = TinyOptions();
  options.models = {Case("tiny", {16}, {0})};
  // The stepping clock (1 ms a reading) passes a nanosecond at once.
  options.profile_budget = absl::Nanoseconds(1);
  options.micro_batch_budget = absl::Nanoseconds(1);
  options.collectives_budget = absl::Nanoseconds(1);
  absl::StatusOr<DeviceCheckReport> report = RunOnOneFakeRank(options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->rows, IsEmpty());
  EXPECT_THAT(report->collectives, IsEmpty());
  EXPECT_THAT(report->skipped,
              Contains(HasSubstr("tiny attention at 8 tokens: estimated 0 is "
                                 "past the profile budget")));
  EXPECT_THAT(report->skipped,
              Contains("tiny micro-batch of 16 tokens with 0 recomputed "
                       "layers: past the micro-batch budget"));
  EXPECT_THAT(report->skipped,
              Contains("collectives of 1024 bytes: past the collectives "
                       "budget"));
  EXPECT_THAT(FormatDeviceCheckReport(*report),
              HasSubstr("time error: no rows"));
}

TEST(DeviceCheckTest, BadOptionsNameTheField) {
  DeviceCheckOptions options = TinyOptions();
  options.models[0].checkpointed_layers = {3};
  EXPECT_THAT(ValidateDeviceCheckOptions(options).message(),
              HasSubstr("tiny: recomputed layers 3 is outside [0, 2]"));

  options = TinyOptions();
  options.models[0].micro_batch_tokens = {48, 16};
  EXPECT_THAT(ValidateDeviceCheckOptions(options).message(),
              HasSubstr("tiny micro-batch tokens must be positive and "
                        "ascending; item 1 is 16 after 48"));

  options = TinyOptions();
  options.micro_batch_budget = absl::ZeroDuration();
  EXPECT_THAT(ValidateDeviceCheckOptions(options).message(),
              HasSubstr("micro_batch_budget = 0 must be positive"));

  options = TinyOptions();
  options.models.clear();
  EXPECT_EQ(ValidateDeviceCheckOptions(options).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunOnOneFakeRank(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
