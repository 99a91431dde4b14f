#include "worker/execution/equivalence_test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace dcp {
namespace testing {

constexpr int kWorldSize = 4;

const std::vector<int64_t>& EquivalenceSequenceLengths() {
  static const std::vector<int64_t> lengths = {13, 7, 20, 5, 16, 9, 11, 4};
  return lengths;
}

const std::vector<std::string>& EquivalencePlanNames() {
  static const std::vector<std::string> names = {
      "all_sp1_round_robin", "mixed_sp_1_1_2", "sp4_recompute",
      "sp2_sp2_packings"};
  return names;
}

MicroBatchPlan MicroBatch(std::vector<int> sequences, int checkpointed) {
  MicroBatchPlan micro_batch;
  micro_batch.sequence_indices = std::move(sequences);
  micro_batch.checkpointed_layers = checkpointed;
  return micro_batch;
}

GroupPlan Group(std::vector<int> ranks, std::vector<MicroBatchPlan> mbs) {
  GroupPlan group;
  group.ranks = std::move(ranks);
  group.micro_batches = std::move(mbs);
  return group;
}

absl::StatusOr<Plan> EquivalencePlanNamed(const std::string& name) {
  Plan plan;
  plan.strategy = name;
  if (name == "all_sp1_round_robin") {
    for (int rank = 0; rank < kWorldSize; ++rank) {
      plan.groups.push_back(
          Group({rank}, {MicroBatch({rank}, 0), MicroBatch({rank + 4}, 0)}));
    }
  } else if (name == "mixed_sp_1_1_2") {
    plan.groups = {
        Group({0},
              {MicroBatch({0}, 0), MicroBatch({3}, 1), MicroBatch({7}, 0)}),
        Group({1}, {MicroBatch({1, 5}, 2)}),
        Group({2, 3}, {MicroBatch({2}, 1), MicroBatch({4, 6}, 0)}),
    };
  } else if (name == "sp4_recompute") {
    plan.groups = {
        Group({0, 1, 2, 3}, {MicroBatch({0, 1}, 1), MicroBatch({2}, 2),
                             MicroBatch({3, 4, 5}, 1), MicroBatch({6, 7}, 2)})};
  } else if (name == "sp2_sp2_packings") {
    plan.groups = {
        Group({0, 1}, {MicroBatch({0, 2, 3}, 0), MicroBatch({7}, 1)}),
        Group({2, 3},
              {MicroBatch({1}, 2), MicroBatch({4, 5}, 0), MicroBatch({6}, 1)}),
    };
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown plan ", name));
  }
  return plan;
}

Plan SingleProcessPlan() {
  std::vector<int> all(EquivalenceSequenceLengths().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  Plan plan;
  plan.groups = {Group({0}, {MicroBatch(all, 0)})};
  return plan;
}

Snapshot TakeSnapshot(torch::nn::Module& model, double global_loss) {
  Snapshot snapshot;
  for (const auto& item : model.named_parameters()) {
    snapshot.names.push_back(item.key());
    snapshot.gradients.push_back(item.value().grad().detach().clone());
    snapshot.parameters.push_back(item.value().detach().clone());
  }
  snapshot.global_loss = global_loss;
  return snapshot;
}

absl::Status CompareSnapshots(const Snapshot& reference, const Snapshot& actual,
                              double tolerance, const std::string& label,
                              int rank, bool require_nonzero_gradients) {
  double worst_gradient = 0, worst_parameter = 0, smallest_gradient = 1e30;
  std::string worst_gradient_name, worst_parameter_name;
  for (size_t i = 0; i < reference.names.size(); ++i) {
    smallest_gradient = std::min(
        smallest_gradient, reference.gradients[i].abs().max().item<double>());
    const double gradient_diff = (reference.gradients[i] - actual.gradients[i])
                                     .abs()
                                     .max()
                                     .item<double>();
    const double parameter_diff =
        (reference.parameters[i] - actual.parameters[i])
            .abs()
            .max()
            .item<double>();
    if (gradient_diff > worst_gradient) {
      worst_gradient = gradient_diff;
      worst_gradient_name = reference.names[i];
    }
    if (parameter_diff > worst_parameter) {
      worst_parameter = parameter_diff;
      worst_parameter_name = reference.names[i];
    }
  }
  std::printf(
      "[rank %d] %s: max |grad - reference| = %.3g (%s), max |param - "
      "reference| = %.3g (%s), loss %.9f vs reference %.9f\n",
      rank, label.c_str(), worst_gradient, worst_gradient_name.c_str(),
      worst_parameter, worst_parameter_name.c_str(), actual.global_loss,
      reference.global_loss);
  if (require_nonzero_gradients && !(smallest_gradient > 0)) {
    return absl::InternalError(
        "a parameter of the reference has an all-zero gradient; the check "
        "would not see it");
  }
  if (!(worst_gradient < tolerance) || !(worst_parameter < tolerance) ||
      !(std::abs(actual.global_loss - reference.global_loss) < tolerance)) {
    return absl::InternalError(
        absl::StrCat(label,
                     ": plan differs from the single-process reference: max "
                     "gradient diff ",
                     worst_gradient, " (", worst_gradient_name,
                     "), max parameter diff ", worst_parameter, " (",
                     worst_parameter_name, "), loss ", actual.global_loss,
                     " vs ", reference.global_loss, "; tolerance ", tolerance));
  }
  return absl::OkStatus();
}

absl::Status CheckRanksAgree(Communicator& communicator,
                             torch::nn::Module& model) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : model.parameters()) {
    flat.push_back(p.detach().reshape({-1}));
  }
  torch::Tensor own = torch::cat(flat);
  torch::Tensor rows =
      torch::zeros({communicator.world_size(), own.numel()}, own.options());
  rows[communicator.rank()].copy_(own);
  if (rows.scalar_type() != torch::kFloat32) {
    // Gloo sums floats; the rows of other ranks are zeros, so float32 sums
    // of bf16 values are exact.
    rows = rows.to(torch::kFloat32);
    own = own.to(torch::kFloat32);
  }
  absl::Status status =
      communicator.World().AllReduceSum(rows, absl::Seconds(30));
  if (!status.ok()) return status;
  for (int r = 0; r < communicator.world_size(); ++r) {
    if (!torch::equal(rows[r], own)) {
      return absl::InternalError(
          absl::StrCat("rank ", communicator.rank(), " and rank ", r,
                       " hold different parameters after the step"));
    }
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace dcp
