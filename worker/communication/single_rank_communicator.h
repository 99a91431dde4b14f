// A world of one rank whose collectives need no backend: a sum over one
// member is its input, an exchange with oneself a copy.

#ifndef DCP_WORKER_COMMUNICATION_SINGLE_RANK_COMMUNICATOR_H_
#define DCP_WORKER_COMMUNICATION_SINGLE_RANK_COMMUNICATOR_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "torch/torch.h"
#include "worker/communication/communicator.h"

namespace dcp {

/// A CommGroup of one member, in process: AllToAll copies its input,
/// AllReduceSum and Barrier do nothing. Counts its calls so tests can check
/// what was (not) communicated. Not thread-safe.
class SingleRankGroup : public CommGroup {
 public:
  explicit SingleRankGroup(int global_rank) : global_ranks_{global_rank} {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<int>& global_ranks() const override {
    return global_ranks_;
  }

  absl::Status AllToAll(const torch::Tensor& input, torch::Tensor& output,
                        absl::Duration /*timeout*/) override {
    ++all_to_all_calls;
    if (!output.defined() || output.sizes() != input.sizes()) {
      return absl::InvalidArgumentError(
          "AllToAll: output must be allocated with the input's shape");
    }
    output.copy_(input);
    return absl::OkStatus();
  }
  absl::Status AllReduceSum(torch::Tensor& /*tensor*/,
                            absl::Duration /*timeout*/) override {
    ++all_reduce_calls;
    return absl::OkStatus();
  }
  absl::Status Barrier(absl::Duration /*timeout*/) override {
    ++barrier_calls;
    return absl::OkStatus();
  }
  /// One member: the sum is the input and the gather is the input.
  absl::Status ReduceScatterSum(const torch::Tensor& input,
                                torch::Tensor& output,
                                absl::Duration /*timeout*/) override {
    ++reduce_scatter_calls;
    return CopyWhole("ReduceScatterSum", input, output);
  }
  absl::Status AllGather(const torch::Tensor& input, torch::Tensor& output,
                         absl::Duration /*timeout*/) override {
    ++all_gather_calls;
    return CopyWhole("AllGather", input, output);
  }

  int reduce_scatter_calls = 0;
  int all_gather_calls = 0;
  int all_to_all_calls = 0;
  int all_reduce_calls = 0;
  int barrier_calls = 0;

 private:
  static absl::Status CopyWhole(const char* op, const torch::Tensor& input,
                                torch::Tensor& output) {
    if (!output.defined() || output.sizes() != input.sizes()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op,
                       ": output must be allocated with the input's shape (one "
                       "member)"));
    }
    output.copy_(input);
    return absl::OkStatus();
  }

  std::vector<int> global_ranks_;
};

/// A world of one rank (rank 0) whose only group is itself; Group() of
/// anything but {0} is INVALID_ARGUMENT, as for a real rank asking for a
/// group it is not in. What a one-GPU run (the device check) uses: with one
/// rank no collective needs a backend, so no NCCL communicator is made.
/// Not thread-safe.
class SingleRankCommunicator : public Communicator {
 public:
  SingleRankCommunicator() : world_(/*global_rank=*/0) {}

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  CommGroup& World() override { return world_; }
  absl::StatusOr<CommGroup*> Group(const std::vector<int>& ranks) override {
    ++group_calls;
    if (ranks != std::vector<int>{0}) {
      return absl::InvalidArgumentError(
          absl::StrCat("this world has one rank (0); a group of ",
                       ranks.size(), " ranks needs a real Communicator"));
    }
    return &world_;
  }
  int groups_created() const override { return 1; }

  SingleRankGroup& world() { return world_; }
  int group_calls = 0;

 private:
  SingleRankGroup world_;
};

}  // namespace dcp

#endif  // DCP_WORKER_COMMUNICATION_SINGLE_RANK_COMMUNICATOR_H_
