#include "cost_model/sub_model_fit.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dcp {
namespace {

// time = latency + bytes / bandwidth, measured exactly at `bytes`.
LinearProblem AlphaBetaProblem(double latency_seconds, double bandwidth,
                               const std::vector<double>& bytes) {
  LinearProblem problem;
  for (double b : bytes) {
    problem.Add({1, b}, 0, latency_seconds + b / bandwidth);
  }
  return problem;
}

TEST(SubModelFitTest, ExactSamplesGiveTheirParametersBack) {
  const LinearProblem problem =
      AlphaBetaProblem(/*latency_seconds=*/1e-5, /*bandwidth=*/1e9,
                       {1e3, 1e4, 1e5, 1e6, 1e7});
  double latency = 0;
  double bandwidth = 0;
  const ModelFitReport report =
      FitSubModel("all_to_all_intra", 2, /*secondary_column=*/0, problem,
                  ApplyAlphaBeta(&latency, &bandwidth));
  EXPECT_FALSE(report.used_defaults) << report.note;
  EXPECT_EQ(report.name, "all_to_all_intra");
  EXPECT_EQ(report.num_samples, 5);
  EXPECT_NEAR(latency, 1e-5, 1e-10);
  EXPECT_NEAR(bandwidth, 1e9, 1e3);
  EXPECT_LT(report.rms_relative_error, 1e-9);
  EXPECT_EQ(report.held_out_samples, 5);
  EXPECT_LT(report.held_out_rms_relative_error, 1e-9);
}

TEST(SubModelFitTest, TooFewSamplesKeepTheDefaults) {
  const LinearProblem problem = AlphaBetaProblem(1e-5, 1e9, {1e3, 1e4, 1e5});
  double latency = 7;
  double bandwidth = 8;
  const ModelFitReport report =
      FitSubModel("all_reduce_inter", 2, /*secondary_column=*/0, problem,
                  ApplyAlphaBeta(&latency, &bandwidth));
  EXPECT_TRUE(report.used_defaults);
  EXPECT_EQ(report.note, "3 samples, need at least 4; keeping defaults");
  EXPECT_EQ(latency, 7);
  EXPECT_EQ(bandwidth, 8);
}

TEST(SubModelFitTest, ANegativeLatencyIsHeldAtZero) {
  // Samples of a pure bandwidth term a little below the line through 0 at
  // small sizes: the unconstrained latency comes out negative.
  LinearProblem problem = AlphaBetaProblem(0, 1e9, {1e6, 2e6, 4e6, 8e6});
  problem.measured[0] *= 0.9;
  double latency = 7;
  double bandwidth = 8;
  const ModelFitReport report =
      FitSubModel("all_gather_intra", 2, /*secondary_column=*/0, problem,
                  ApplyAlphaBeta(&latency, &bandwidth));
  EXPECT_FALSE(report.used_defaults) << report.note;
  EXPECT_EQ(latency, 0);
  EXPECT_GT(bandwidth, 0);
  EXPECT_NE(report.note.find("with coefficient 0 held at 0"),
            std::string::npos)
      << report.note;
}

TEST(SubModelFitTest, ANonPhysicalFitWithNoTermToHoldKeepsTheDefaults) {
  // Time that shrinks on short rows (time = flops/P * (1 - 100/tokens)): the
  // half-efficiency tokens come out negative.
  LinearProblem problem;
  for (double flops : {1e9, 4e9}) {
    for (double tokens : {200.0, 1600.0}) {
      problem.Add({flops, flops / tokens}, 0,
                  flops * 1e-12 * (1 - 100 / tokens));
    }
  }
  double rate = 7;
  double half = 8;
  const ModelFitReport report =
      FitSubModel("gemm", 2, /*secondary_column=*/-1, problem,
                  ApplyRateCurve(&rate, &half, "half-efficiency tokens"));
  EXPECT_TRUE(report.used_defaults);
  EXPECT_EQ(report.note.rfind("non-physical fit: ", 0), 0u) << report.note;
  EXPECT_EQ(rate, 7);
  EXPECT_EQ(half, 8);
}

TEST(SubModelFitTest, BusBytesCountTheAllReduceTwice) {
  ProfileSample sample;
  sample.group_size = 4;
  sample.bytes = 1000;
  sample.op = ProfileSample::Op::kAllToAll;
  EXPECT_DOUBLE_EQ(BusBytes(sample), 750);
  sample.op = ProfileSample::Op::kAllReduce;
  EXPECT_DOUBLE_EQ(BusBytes(sample), 1500);
}

}  // namespace
}  // namespace dcp
