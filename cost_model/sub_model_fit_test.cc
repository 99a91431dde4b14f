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

// An alpha-beta sub-model fitted from defaults of 7 s latency and 8 B/s.
struct AlphaBetaFit {
  double latency_seconds = 7;
  double bandwidth = 8;
  ModelFitReport report;
};

AlphaBetaFit FitAlphaBeta(const std::string& name,
                          const LinearProblem& problem) {
  AlphaBetaFit fit;
  fit.report =
      FitSubModel(name, 2, /*secondary_column=*/0, problem,
                  ApplyAlphaBeta(&fit.latency_seconds, &fit.bandwidth));
  return fit;
}

TEST(SubModelFitTest, ExactSamplesGiveTheirParametersBack) {
  const AlphaBetaFit fit =
      FitAlphaBeta("all_to_all_intra",
                   AlphaBetaProblem(/*latency_seconds=*/1e-5, /*bandwidth=*/1e9,
                                    {1e3, 1e4, 1e5, 1e6, 1e7}));
  const ModelFitReport& report = fit.report;
  EXPECT_FALSE(report.used_defaults) << report.note;
  EXPECT_EQ(report.name, "all_to_all_intra");
  EXPECT_EQ(report.num_samples, 5);
  EXPECT_NEAR(fit.latency_seconds, 1e-5, 1e-10);
  EXPECT_NEAR(fit.bandwidth, 1e9, 1e3);
  EXPECT_LT(report.rms_relative_error, 1e-9);
  EXPECT_EQ(report.held_out_samples, 5);
  EXPECT_LT(report.held_out_rms_relative_error, 1e-9);
}

TEST(SubModelFitTest, TooFewSamplesKeepTheDefaults) {
  const AlphaBetaFit fit = FitAlphaBeta(
      "all_reduce_inter", AlphaBetaProblem(1e-5, 1e9, {1e3, 1e4, 1e5}));
  EXPECT_TRUE(fit.report.used_defaults);
  EXPECT_EQ(fit.report.note, "3 samples, need at least 4; keeping defaults");
  EXPECT_EQ(fit.latency_seconds, 7);
  EXPECT_EQ(fit.bandwidth, 8);
}

TEST(SubModelFitTest, ANegativeLatencyIsHeldAtZero) {
  // Samples of a pure bandwidth term a little below the line through 0 at
  // small sizes: the unconstrained latency comes out negative.
  LinearProblem problem = AlphaBetaProblem(0, 1e9, {1e6, 2e6, 4e6, 8e6});
  problem.measured[0] *= 0.9;
  const AlphaBetaFit fit = FitAlphaBeta("all_gather_intra", problem);
  EXPECT_FALSE(fit.report.used_defaults) << fit.report.note;
  EXPECT_EQ(fit.latency_seconds, 0);
  EXPECT_GT(fit.bandwidth, 0);
  EXPECT_NE(fit.report.note.find("with coefficient 0 held at 0"),
            std::string::npos)
      << fit.report.note;
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
