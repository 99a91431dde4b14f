#include "planner/plan/plan_json.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"
#include "planner/plan/plan_testing.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

class PlanJsonTest : public ::testing::Test {
 protected:
  PlanJsonTest()
      : cost_model_(*CostModel::CreateDefault(*ModelPreset("llama3-8b"),
                                              H200Cluster(1, 8))) {
    plan_.strategy = "dcp";
    GroupPlan wide;
    wide.ranks = {0, 1, 2, 3};
    wide.micro_batches.push_back(
        {/*sequence_indices=*/{0}, /*checkpointed=*/4});
    wide.micro_batches.push_back({{1, 2}, 0});
    GroupPlan narrow;
    narrow.ranks = {4, 5};
    narrow.micro_batches.push_back({{3, 4}, 0});
    GroupPlan idle;
    idle.ranks = {6, 7};
    plan_.groups = {wide, narrow, idle};
    PredictPlan(cost_model_, lengths_, plan_);
    plan_.lower_bound_seconds = 0.75 * plan_.predicted_step_seconds;
  }

  CostModel cost_model_;
  std::vector<int64_t> lengths_ = {32768, 2048, 1000, 700, 12};
  Plan plan_;
};

TEST_F(PlanJsonTest, WritesEveryField) {
  const Json json = Json::parse(PlanToJson(plan_, lengths_, cost_model_));
  EXPECT_EQ(json["strategy"], "dcp");
  EXPECT_DOUBLE_EQ(json["predicted_step_seconds"].get<double>(),
                   plan_.predicted_step_seconds);
  EXPECT_DOUBLE_EQ(json["lower_bound_seconds"].get<double>(),
                   plan_.lower_bound_seconds);
  EXPECT_NEAR(json["gap_to_lower_bound"].get<double>(), 1 / 0.75 - 1, 1e-12);
  EXPECT_DOUBLE_EQ(json["exposed_allreduce_seconds"].get<double>(),
                   plan_.exposed_allreduce_seconds);
  EXPECT_DOUBLE_EQ(json["memory_budget_bytes"].get<double>(),
                   cost_model_.MemoryBudgetBytes());
  EXPECT_EQ(json["num_sequences"], 5);
  ASSERT_EQ(json["groups"].size(), 3u);
  const Json& wide = json["groups"][0];
  EXPECT_EQ(wide["ranks"], Json({0, 1, 2, 3}));
  EXPECT_EQ(wide["sp_size"], 4);
  EXPECT_DOUBLE_EQ(wide["predicted_seconds"].get<double>(),
                   plan_.groups[0].predicted_seconds);
  ASSERT_EQ(wide["micro_batches"].size(), 2u);
  const Json& second = wide["micro_batches"][1];
  EXPECT_EQ(second["sequence_indices"], Json({1, 2}));
  EXPECT_EQ(second["tokens"], 3048);
  EXPECT_EQ(wide["micro_batches"][0]["checkpointed_layers"], 4);
  EXPECT_GT(second["predicted_seconds"].get<double>(), 0);
  EXPECT_GT(second["predicted_peak_bytes"].get<double>(), 0);
  EXPECT_TRUE(json["groups"][2]["micro_batches"].empty());
}

TEST_F(PlanJsonTest, RoundTripKeepsStructureAndPredictions) {
  const std::string text = PlanToJson(plan_, lengths_, cost_model_);
  absl::StatusOr<Plan> read = PlanFromJson(text);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSamePlan(*read, plan_);
  // Writing what was read gives the same text.
  EXPECT_EQ(PlanToJson(*read, lengths_, cost_model_), text);
}

TEST_F(PlanJsonTest, SlowestGroupDefaultsToSlowestGroupSeconds) {
  Json json = Json::parse(PlanToJson(plan_, lengths_, cost_model_));
  json.erase("slowest_group_seconds");
  absl::StatusOr<Plan> read = PlanFromJson(json.dump());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->slowest_group_seconds, plan_.slowest_group_seconds);
}

TEST_F(PlanJsonTest, OutOfRangeIndexIsWrittenWithoutCrashing) {
  plan_.groups[1].micro_batches[0].sequence_indices = {3, 99, -4};
  const Json json = Json::parse(PlanToJson(plan_, lengths_, cost_model_));
  EXPECT_EQ(json["groups"][1]["micro_batches"][0]["tokens"], 700);
  absl::StatusOr<Plan> read = PlanFromJson(json.dump());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->groups[1].micro_batches[0].sequence_indices,
            std::vector<int>({3, 99, -4}));
}

// Two phases: sequence 0 on SP 8, then the rest on the fixture's layout.
TEST_F(PlanJsonTest, PhasedPlanRoundTripsAndItsDerivedFieldsAreChecked) {
  PhasedPlan phased;
  phased.strategy = "dcp-phased";
  Plan first;
  GroupPlan all;
  all.ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  all.micro_batches.push_back({{0}, 2});
  first.groups = {all};
  Plan second = plan_;
  second.groups[0].micro_batches.erase(second.groups[0].micro_batches.begin());
  phased.phases = {first, second};
  PredictPhasedPlan(cost_model_, lengths_, phased);
  phased.lower_bound_seconds = 0.5 * phased.predicted_step_seconds;
  const std::string text = PhasedPlanToJson(phased, lengths_, cost_model_);
  EXPECT_TRUE(PlanJsonHasPhases(text));
  EXPECT_FALSE(PlanJsonHasPhases(PlanToJson(plan_, lengths_, cost_model_)));
  absl::StatusOr<PhasedPlan> read = PhasedPlanFromJson(text);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->strategy, "dcp-phased");
  ASSERT_EQ(read->phases.size(), 2u);
  EXPECT_EQ(read->phases[0].groups[0].ranks, all.ranks);
  EXPECT_EQ(read->phases[0].groups[0].micro_batches[0].checkpointed_layers, 2);
  EXPECT_EQ(read->phases[1].groups.size(), 3u);
  EXPECT_DOUBLE_EQ(read->predicted_step_seconds, phased.predicted_step_seconds);
  EXPECT_DOUBLE_EQ(read->phases_seconds, phased.phases_seconds);
  EXPECT_DOUBLE_EQ(read->lower_bound_seconds, phased.lower_bound_seconds);
  EXPECT_TRUE(ValidatePhasedPlan(cost_model_, lengths_, *read).ok());
  EXPECT_TRUE(CheckPhasedDerivedFields(text, lengths_, cost_model_).ok());
  // A one-layout file reads as one phase.
  absl::StatusOr<PhasedPlan> one =
      PhasedPlanFromJson(PlanToJson(plan_, lengths_, cost_model_));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->phases.size(), 1u);
  // A phase's contradicting tokens and a malformed phase name their path.
  Json json = Json::parse(text);
  json["phases"][1]["groups"][1]["micro_batches"][0]["tokens"] = 5;
  const absl::Status contradiction =
      CheckPhasedDerivedFields(json.dump(), lengths_, cost_model_);
  EXPECT_THAT(contradiction.message(),
              HasSubstr("phases[1].groups[1].micro_batches[0].tokens = 5"));
  json = Json::parse(text);
  json["phases"][0]["groups"][0].erase("ranks");
  EXPECT_THAT(PhasedPlanFromJson(json.dump()).status().message(),
              HasSubstr("phases[0].groups[0]"));
}

TEST(PlanFromJsonTest, RejectsNonJsonAndNonObjects) {
  EXPECT_EQ(PlanFromJson("{not json").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(PlanFromJson("").status().message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(PlanFromJson("[1, 2]").status().message(),
              HasSubstr("not a JSON object"));
}

class PlanFromJsonErrorTest : public PlanJsonTest {
 protected:
  std::string ErrorAfter(const std::function<void(Json&)>& corrupt) {
    Json json = Json::parse(PlanToJson(plan_, lengths_, cost_model_));
    corrupt(json);
    absl::StatusOr<Plan> read = PlanFromJson(json.dump());
    EXPECT_FALSE(read.ok());
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(read.status().message());
  }
};

TEST_F(PlanFromJsonErrorTest, NamesThePathOfAMissingField) {
  EXPECT_THAT(ErrorAfter([](Json& j) { j.erase("strategy"); }),
              HasSubstr("'strategy' is missing"));
  EXPECT_THAT(ErrorAfter([](Json& j) { j.erase("groups"); }),
              HasSubstr("'groups' is missing"));
  EXPECT_THAT(ErrorAfter([](Json& j) { j["groups"][2].erase("ranks"); }),
              HasSubstr("'groups[2].ranks' is missing"));
  EXPECT_THAT(ErrorAfter([](Json& j) {
                j["groups"][0]["micro_batches"][1].erase("sequence_indices");
              }),
              HasSubstr("'groups[0].micro_batches[1].sequence_indices' is "
                        "missing"));
  EXPECT_THAT(
      ErrorAfter([](Json& j) {
        j["groups"][1]["micro_batches"][0].erase("predicted_peak_bytes");
      }),
      HasSubstr("'groups[1].micro_batches[0].predicted_peak_bytes'"));
}

TEST_F(PlanFromJsonErrorTest, NamesThePathOfAWronglyTypedField) {
  EXPECT_THAT(ErrorAfter([](Json& j) { j["strategy"] = 3; }),
              HasSubstr("'strategy' is an integer; it must be a string"));
  EXPECT_THAT(ErrorAfter([](Json& j) { j["predicted_step_seconds"] = "x"; }),
              HasSubstr("'predicted_step_seconds' is a string"));
  EXPECT_THAT(ErrorAfter([](Json& j) { j["groups"] = Json::object(); }),
              HasSubstr("'groups' is an object; it must be an array"));
  EXPECT_THAT(ErrorAfter([](Json& j) { j["groups"][1] = 5; }),
              HasSubstr("'groups[1]' is an integer; it must be a JSON object"));
  EXPECT_THAT(ErrorAfter([](Json& j) {
                j["groups"][0]["micro_batches"][1]["sequence_indices"][1] = 1.5;
              }),
              HasSubstr("'groups[0].micro_batches[1].sequence_indices[1]' is "
                        "a number (1.5); it must be an integer"));
  EXPECT_THAT(ErrorAfter([](Json& j) {
                j["groups"][0]["micro_batches"][0]["checkpointed_layers"] =
                    true;
              }),
              HasSubstr("'groups[0].micro_batches[0].checkpointed_layers' is "
                        "a boolean"));
  EXPECT_THAT(ErrorAfter([](Json& j) { j["groups"][0]["ranks"] = "0-3"; }),
              HasSubstr("'groups[0].ranks' is a string; it must be an array "
                        "of integers"));
  EXPECT_THAT(ErrorAfter([](Json& j) { j["groups"][0]["ranks"][0] = 1e12; }),
              HasSubstr("'groups[0].ranks[0]'"));
  EXPECT_THAT(ErrorAfter([](Json& j) {
                j["groups"][0]["ranks"][0] = int64_t{1} << 40;
              }),
              HasSubstr("out of range"));
}

}  // namespace
}  // namespace dcp
