// Checks that @libtorch//:libtorch compiles, links and computes: autograd
// through a matmul, and a one-rank c10d Gloo all-reduce (USE_C10D_GLOO).

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

#include <chrono>
#include <vector>

#include "gtest/gtest.h"

namespace dcp {
namespace {

// Loss L = sum((x @ w)^2), so dL/dx = 2 (x @ w) w^T and dL/dw = 2 x^T (x @ w).
TEST(LibtorchSmokeTest, MatmulBackwardGivesAnalyticGradients) {
  torch::Tensor x = torch::tensor({{1.0, 2.0}, {3.0, 4.0}},
                                  torch::dtype(torch::kFloat64))
                        .requires_grad_();
  torch::Tensor w = torch::tensor({{1.0, 0.5}, {-1.0, 2.0}},
                                  torch::dtype(torch::kFloat64))
                        .requires_grad_();

  torch::Tensor loss = x.matmul(w).pow(2).sum();
  loss.backward();

  // x @ w = [[-1, 4.5], [-1, 9.5]].
  EXPECT_DOUBLE_EQ(loss.item<double>(), 112.5);
  const torch::Tensor expected_grad_x =
      torch::tensor({{2.5, 20.0}, {7.5, 40.0}}, torch::dtype(torch::kFloat64));
  const torch::Tensor expected_grad_w =
      torch::tensor({{-8.0, 66.0}, {-12.0, 94.0}}, torch::dtype(torch::kFloat64));
  ASSERT_TRUE(x.grad().defined());
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(torch::allclose(x.grad(), expected_grad_x))
      << "dL/dx = " << x.grad();
  EXPECT_TRUE(torch::allclose(w.grad(), expected_grad_w))
      << "dL/dw = " << w.grad();
  EXPECT_DOUBLE_EQ(w.grad()[1][1].item<double>(), 94.0);
}

TEST(LibtorchSmokeTest, SingleRankGlooAllReduceKeepsValues) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto options = c10d::ProcessGroupGloo::Options::create(
      /*timeout=*/std::chrono::milliseconds(10000));
  options->devices.push_back(
      c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  c10d::ProcessGroupGloo group(store, /*rank=*/0, /*size=*/1, options);

  std::vector<torch::Tensor> tensors = {torch::arange(4, torch::kFloat32)};
  auto work = group.allreduce(tensors);
  ASSERT_TRUE(work->wait(std::chrono::milliseconds(10000)));
  EXPECT_TRUE(torch::equal(tensors[0], torch::arange(4, torch::kFloat32)));
  EXPECT_EQ(group.getSize(), 1);
}

}  // namespace
}  // namespace dcp
