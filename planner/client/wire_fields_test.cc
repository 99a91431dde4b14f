#include "planner/client/wire_fields.h"

#include <cstdint>
#include <limits>
#include <string>

#include "common/struct_fields_testing.h"
#include "dcp/v1/cluster.pb.h"
#include "dcp/v1/model.pb.h"
#include "dcp/v1/profile.pb.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

// A member of each type StructField holds.
struct Everything {
  std::string text;
  int count = 0;
  int64_t wide_count = 0;
  bool flag = false;
  double fraction = 0;
  double bytes = 0;
};

// Everything in two messages: ModelSpec has string, int32 and bool fields,
// ClusterSpec double and int64 ones.
constexpr StructField<Everything> kInModelSpec[] = {
    {"name", &Everything::text},
    {"num_layers", &Everything::count},
    {"hidden_size", &Everything::wide_count},
    {"causal", &Everything::flag},
};
constexpr StructField<Everything> kInClusterSpec[] = {
    {"usable_memory_fraction", &Everything::fraction},
    {"gpu_memory_bytes", &Everything::bytes},
};

TEST(WireFieldsTest, CopiesEachMemberTypeBothWays) {
  const Everything sent{"tiny", 12, 4096, true, 0.75, 141e9};
  v1::ModelSpec model;
  CopyToMessage<kInModelSpec>(sent, model);
  EXPECT_EQ(model.name(), "tiny");
  EXPECT_EQ(model.num_layers(), 12);
  EXPECT_EQ(model.hidden_size(), 4096);
  EXPECT_TRUE(model.causal());
  v1::ClusterSpec cluster;
  CopyToMessage<kInClusterSpec>(sent, cluster);
  EXPECT_EQ(cluster.usable_memory_fraction(), 0.75);
  EXPECT_EQ(cluster.gpu_memory_bytes(), 141000000000);

  Everything back;
  CopyFromMessage<kInModelSpec>(model, back);
  CopyFromMessage<kInClusterSpec>(cluster, back);
  testing::ExpectEveryFieldEq<Everything>(kInModelSpec, back, sent);
  testing::ExpectEveryFieldEq<Everything>(kInClusterSpec, back, sent);
}

TEST(WireFieldsTest, LeavesWhatTheTableDoesNotNameAsItIs) {
  v1::ModelSpec model;
  model.set_vocab_size(7);
  model.set_gated_mlp(true);
  CopyToMessage<kInModelSpec>(Everything{}, model);
  EXPECT_EQ(model.vocab_size(), 7);
  EXPECT_TRUE(model.gated_mlp());

  Everything everything;
  everything.fraction = 0.5;
  CopyFromMessage<kInModelSpec>(v1::ModelSpec(), everything);
  EXPECT_EQ(everything.fraction, 0.5);
}

TEST(WireFieldsTest, Int64MembersInInt32FieldsAreCastBothWays) {
  Everything everything;
  everything.wide_count = (int64_t{1} << 32) + 5;
  v1::ModelSpec model;
  CopyToMessage<kInModelSpec>(everything, model);
  EXPECT_EQ(model.hidden_size(), 5);
  model.set_hidden_size(-7);
  CopyFromMessage<kInModelSpec>(model, everything);
  EXPECT_EQ(everything.wide_count, -7);
}

TEST(WireFieldsTest, DoublesInInt64FieldsAreRoundedAndSaturated) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  EXPECT_EQ(RoundToInt64(0.5), 1);
  EXPECT_EQ(RoundToInt64(-0.5), -1);
  EXPECT_EQ(RoundToInt64(0.49), 0);
  // Saturates from 2^63 - 1024, the largest double below 2^63 (the bound's
  // literal rounds to it), and likewise below zero.
  EXPECT_EQ(RoundToInt64(9223372036854773760.0), 9223372036854773760);
  EXPECT_EQ(RoundToInt64(9223372036854774784.0), kMax);
  EXPECT_EQ(RoundToInt64(-9223372036854773760.0), -9223372036854773760);
  EXPECT_EQ(RoundToInt64(-9223372036854774784.0), kMin);
  EXPECT_EQ(RoundToInt64(kInfinity), kMax);
  EXPECT_EQ(RoundToInt64(-kInfinity), kMin);
  EXPECT_EQ(RoundToInt64(std::numeric_limits<double>::quiet_NaN()), 0);

  Everything everything;
  everything.bytes = -kInfinity;
  v1::ClusterSpec cluster;
  CopyToMessage<kInClusterSpec>(everything, cluster);
  EXPECT_EQ(cluster.gpu_memory_bytes(), kMin);
  cluster.set_gpu_memory_bytes((int64_t{1} << 53) + 1);
  CopyFromMessage<kInClusterSpec>(cluster, everything);
  EXPECT_EQ(everything.bytes, static_cast<double>((int64_t{1} << 53) + 1));
}

TEST(WireFieldsDeathTest, AbortsOnANameTheMessageHasNoSingularFieldOf) {
  static constexpr StructField<Everything> kUnknown[] = {
      {"no_such_field", &Everything::count}};
  Everything everything;
  v1::ModelSpec model;
  EXPECT_DEATH(CopyToMessage<kUnknown>(everything, model),
               "dcp.v1.ModelSpec.no_such_field: no such singular field");
  EXPECT_DEATH(CopyFromMessage<kUnknown>(model, everything),
               "dcp.v1.ModelSpec.no_such_field: no such singular field");
  v1::ProfileSet profile_set;
  static constexpr StructField<Everything> kRepeated[] = {
      {"samples", &Everything::count}};
  EXPECT_DEATH(CopyToMessage<kRepeated>(everything, profile_set),
               "dcp.v1.ProfileSet.samples: no such singular field");
}

TEST(WireFieldsDeathTest, AbortsOnAMemberTypeTheWireTypeDoesNotCarry) {
  static constexpr StructField<Everything> kIntInBool[] = {
      {"causal", &Everything::count}};
  static constexpr StructField<Everything> kBoolInDouble[] = {
      {"usable_memory_fraction", &Everything::flag}};
  Everything everything;
  v1::ModelSpec model;
  v1::ClusterSpec cluster;
  EXPECT_DEATH(CopyToMessage<kIntInBool>(everything, model),
               "dcp.v1.ModelSpec.causal: its wire type bool does not carry a "
               "member of type int");
  EXPECT_DEATH(CopyFromMessage<kBoolInDouble>(cluster, everything),
               "dcp.v1.ClusterSpec.usable_memory_fraction: its wire type "
               "double does not carry a member of type bool");
}

}  // namespace
}  // namespace dcp
