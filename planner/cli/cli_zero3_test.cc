// `dcp --zero3`: llama3-70b, which does not fit 32 H200s with ZeRO-1, plans
// and simulates with ZeRO-3 sharding, every strategy priced by the same
// cost model.
#include <string>

#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/cli/cli_test_util.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(CliZero3Test, HelpOffersTheFlag) {
  for (const char* subcommand : {"simulate", "plan", "validate", "price"}) {
    SCOPED_TRACE(subcommand);
    EXPECT_THAT(RunCli({subcommand, "--help"}).out,
                AllOf(HasSubstr("--zero3"), HasSubstr("ZeRO-3 / FSDP2")));
  }
}

TEST(CliZero3Test, SimulateLlama70bOnFourNodes) {
  // Without --zero3 the model state alone does not fit, and it says what
  // would.
  const CliResult zero1 =
      RunCli({"simulate", "--model=llama3-70b", "--nodes=4", "--steps=2"});
  EXPECT_NE(zero1.exit_code, 0);
  EXPECT_THAT(zero1.err, AllOf(HasSubstr("more GPUs cannot help"),
                               HasSubstr("use ZeRO-3")));

  const CliResult zero3 = RunCli(
      {"simulate", "--model=llama3-70b", "--nodes=4", "--steps=2", "--zero3"});
  ASSERT_EQ(zero3.exit_code, 0) << zero3.err;
  // dcp's predicted step time beside the peers'.
  EXPECT_THAT(zero3.out,
              AllOf(HasSubstr("\ndcp "), HasSubstr("best-static"),
                    HasSubstr("megatron-dyncp"), HasSubstr("step (s)"),
                    HasSubstr("lower bound:")));
  EXPECT_THAT(zero3.err, Not(HasSubstr("does not fit")));
}

TEST(CliZero3Test, PlanWritesAPlanThatValidatesWithTheFlag) {
  const std::string plan_file = TempPath("zero3_plan.json");
  const std::string lengths_file = TempPath("zero3_lengths.txt");
  const CliResult plan = RunCli(
      {"plan", "--model=llama3-70b", "--nodes=8", "--zero3",
       "--write-lengths=" + lengths_file});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  WriteTestFile(plan_file, plan.out);
  ASSERT_FALSE(HasFailure()) << "the plan was not written";
  const CliResult valid = RunCli(
      {"validate", "--model=llama3-70b", "--nodes=8", "--zero3",
       "--plan=" + plan_file, "--lengths=" + lengths_file});
  EXPECT_EQ(valid.exit_code, 0) << valid.out << valid.err;
  // Without the flag the same plan is priced against a state that does not
  // fit.
  EXPECT_NE(RunCli({"validate", "--model=llama3-70b", "--nodes=8",
                    "--plan=" + plan_file, "--lengths=" + lengths_file})
                .exit_code,
            0);
}

}  // namespace
}  // namespace dcp
