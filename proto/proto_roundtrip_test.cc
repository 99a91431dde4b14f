// Round-trips dcp.v1 messages through the wire format.

#include <string>

#include "dcp/v1/batch.pb.h"
#include "dcp/v1/plan.pb.h"
#include "dcp/v1/profile.pb.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dcp::v1 {
namespace {

using ::google::protobuf::util::MessageDifferencer;

Plan MakeTwoGroupPlan() {
  Plan plan;
  plan.set_step(42);
  plan.set_strategy("dcp");
  plan.set_predicted_step_seconds(1.25);
  plan.set_lower_bound_seconds(1.0);
  plan.set_exposed_allreduce_seconds(0.05);

  Group* sp_group = plan.add_groups();
  sp_group->add_ranks(0);
  sp_group->add_ranks(1);
  sp_group->set_sp_size(2);
  sp_group->set_predicted_seconds(1.2);
  MicroBatch* long_sequence = sp_group->add_micro_batches();
  long_sequence->add_sequence_indices(3);
  long_sequence->set_checkpointed_layers(16);
  long_sequence->set_predicted_seconds(1.2);
  long_sequence->set_predicted_peak_bytes(int64_t{60} << 30);  // > 2^32.

  Group* single_gpu = plan.add_groups();
  single_gpu->add_ranks(2);
  single_gpu->set_sp_size(1);
  single_gpu->set_predicted_seconds(0.9);
  MicroBatch* short_sequences = single_gpu->add_micro_batches();
  short_sequences->add_sequence_indices(0);
  short_sequences->add_sequence_indices(1);
  short_sequences->add_sequence_indices(2);
  short_sequences->set_predicted_seconds(0.9);
  short_sequences->set_predicted_peak_bytes(int64_t{8} << 30);
  return plan;
}

TEST(ProtoRoundtripTest, PlanSurvivesSerializeAndParse) {
  const Plan original = MakeTwoGroupPlan();
  std::string wire;
  ASSERT_TRUE(original.SerializeToString(&wire));
  ASSERT_FALSE(wire.empty());

  Plan parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));

  std::string difference;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&difference);
  EXPECT_TRUE(differencer.Compare(original, parsed)) << difference;

  EXPECT_EQ(parsed.step(), 42);
  EXPECT_EQ(parsed.strategy(), "dcp");
  ASSERT_EQ(parsed.groups_size(), 2);
  EXPECT_EQ(parsed.groups(0).sp_size(), 2);
  ASSERT_EQ(parsed.groups(0).ranks_size(), 2);
  EXPECT_EQ(parsed.groups(0).ranks(1), 1);
  ASSERT_EQ(parsed.groups(0).micro_batches_size(), 1);
  EXPECT_EQ(parsed.groups(0).micro_batches(0).checkpointed_layers(), 16);
  EXPECT_EQ(parsed.groups(0).micro_batches(0).predicted_peak_bytes(),
            int64_t{60} << 30);
  ASSERT_EQ(parsed.groups(1).micro_batches(0).sequence_indices_size(), 3);
  EXPECT_EQ(parsed.groups(1).micro_batches(0).sequence_indices(2), 2);
  EXPECT_DOUBLE_EQ(parsed.predicted_step_seconds(), 1.25);
  EXPECT_DOUBLE_EQ(parsed.exposed_allreduce_seconds(), 0.05);
  EXPECT_EQ(parsed.SerializeAsString(), wire);
}

TEST(ProtoRoundtripTest, ChangedFieldIsReportedAsDifferent) {
  const Plan original = MakeTwoGroupPlan();
  Plan parsed;
  ASSERT_TRUE(parsed.ParseFromString(original.SerializeAsString()));
  parsed.mutable_groups(1)->mutable_micro_batches(0)->set_sequence_indices(
      /*index=*/2, /*value=*/7);
  EXPECT_FALSE(MessageDifferencer::Equals(original, parsed));
}

TEST(ProtoRoundtripTest, BatchAndProfileSurviveSerializeAndParse) {
  GlobalBatch batch;
  batch.set_step(7);
  Sample* sample = batch.add_samples();
  sample->set_id(11);
  sample->set_length_tokens(131072);

  GlobalBatch parsed_batch;
  ASSERT_TRUE(parsed_batch.ParseFromString(batch.SerializeAsString()));
  EXPECT_TRUE(MessageDifferencer::Equals(batch, parsed_batch));
  EXPECT_EQ(parsed_batch.samples(0).length_tokens(), 131072);

  ProfileSet profiles;
  ProfileSample* attention = profiles.add_samples();
  attention->set_op(ProfileSample::ATTENTION_BACKWARD);
  attention->set_sum_squared_lengths(1.7e10);
  attention->set_measured_seconds(0.031);
  ProfileSet parsed_profiles;
  ASSERT_TRUE(parsed_profiles.ParseFromString(profiles.SerializeAsString()));
  EXPECT_TRUE(MessageDifferencer::Equals(profiles, parsed_profiles));
  EXPECT_EQ(parsed_profiles.samples(0).op(), ProfileSample::ATTENTION_BACKWARD);
}

}  // namespace
}  // namespace dcp::v1
