// What the gradient-equivalence tests of the GPT and of the DiT share: the
// eight test sequences' lengths, the four very different plans over them,
// a snapshot of a model's gradients and parameters after a step, its
// comparison with the single-process reference, and the check that every
// rank holds the same parameters after the step. Test-only.

#ifndef DCP_WORKER_EXECUTION_EQUIVALENCE_TEST_SUPPORT_H_
#define DCP_WORKER_EXECUTION_EQUIVALENCE_TEST_SUPPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/plan.h"
#include "torch/torch.h"
#include "worker/communication/communicator.h"

namespace dcp {
namespace testing {

/// The eight sequences' lengths; some divide neither 2 nor 4
/// (13, 7, 5, 9, 11).
const std::vector<int64_t>& EquivalenceSequenceLengths();

/// The names of the four plans of EquivalencePlanNamed.
const std::vector<std::string>& EquivalencePlanNames();

MicroBatchPlan MicroBatch(std::vector<int> sequences, int checkpointed);
GroupPlan Group(std::vector<int> ranks, std::vector<MicroBatchPlan> mbs);

/// A plan over 4 ranks by name, each covering sequences 0..7 exactly once:
///  - "all_sp1_round_robin": four SP-1 groups, one sequence per micro-batch;
///  - "mixed_sp_1_1_2": SP 1, 1 and 2 in one step, with 3, 1 and 2
///    micro-batches and recompute;
///  - "sp4_recompute": one SP-4 group (more ranks than the tiny models' KV
///    heads), recomputing 1 or 2 layers;
///  - "sp2_sp2_packings": two SP-2 groups packing differently.
/// INVALID_ARGUMENT for another name.
absl::StatusOr<Plan> EquivalencePlanNamed(const std::string& name);

/// The whole batch on one rank: one SP-1 group, one micro-batch of every
/// sequence, no recompute.
Plan SingleProcessPlan();

/// A model's parameters (after the step) and their gradients (all-reduced,
/// before the step), in named_parameters() order.
struct Snapshot {
  std::vector<std::string> names;
  std::vector<torch::Tensor> gradients;
  std::vector<torch::Tensor> parameters;
  double global_loss = 0;
};

Snapshot TakeSnapshot(torch::nn::Module& model, double global_loss);

/// OK when every gradient, every parameter and the loss of `actual` are
/// within `tolerance` (absolute) of `reference`'s; prints the worst
/// differences under `label` and `rank` either way. With
/// `require_nonzero_gradients`, a reference parameter whose gradient is all
/// zero is an error too (the check could not see it).
absl::Status CompareSnapshots(const Snapshot& reference, const Snapshot& actual,
                              double tolerance, const std::string& label,
                              int rank, bool require_nonzero_gradients = false);

/// OK when every rank of `communicator`'s world holds exactly the
/// parameters of `model` (one all-reduce of every rank's flattened copy).
absl::Status CheckRanksAgree(Communicator& communicator,
                             torch::nn::Module& model);

}  // namespace testing
}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_EQUIVALENCE_TEST_SUPPORT_H_
