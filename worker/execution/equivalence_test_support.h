// What the gradient-equivalence tests of the GPT and of the DiT share: the
// eight test sequences' lengths, the four very different plans over them,
// a snapshot of a model's gradients and parameters after a step, its
// comparison with the single-process reference, the check that every rank
// holds the same parameters after the step, and the run of one plan in each
// mode (fp32, fp32 + ZeRO-1, bf16 + ZeRO-1) compared with the fp32 and bf16
// single-process references. Test-only.

#ifndef DCP_WORKER_EXECUTION_EQUIVALENCE_TEST_SUPPORT_H_
#define DCP_WORKER_EXECUTION_EQUIVALENCE_TEST_SUPPORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/plan/phased_plan.h"
#include "planner/plan/plan.h"
#include "torch/torch.h"
#include "worker/communication/communicator.h"
#include "worker/communication/multiprocess_test_util.h"
#include "worker/execution/plan_executor.h"
#include "worker/execution/trainable_model.h"

namespace dcp {
namespace testing {

/// The eight sequences' lengths; some divide neither 2 nor 4
/// (13, 7, 5, 9, 11).
const std::vector<int64_t>& EquivalenceSequenceLengths();

/// The names of the four plans of EquivalencePlanNamed and of the phased
/// plan of EquivalencePhasedPlanNamed.
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

/// A plan that re-groups the 4 ranks within the step by name:
///  - "phased_sp4_then_sp1_sp1_sp2": the two longest sequences on one SP-4
///    group (one recomputing), then, after the barrier, the rest on SP 1,
///    SP 1 and SP 2 groups, as dcp-phased plans do;
/// or any name of EquivalencePlanNamed as one phase. INVALID_ARGUMENT for
/// another name.
absl::StatusOr<PhasedPlan> EquivalencePhasedPlanNamed(const std::string& name);

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

/// How a plan runs: the model's dtype and whether ZeRO-1 shards the update.
struct EquivalenceMode {
  std::string name;
  torch::Dtype dtype = torch::kFloat32;
  bool zero1 = false;
};

/// "fp32" (torch's AdamW on every rank), "fp32_zero1" (reduce-scattered
/// gradients, sharded float32 master weights and AdamW, all-gathered
/// weights) and "bf16_zero1" (the same with bf16 weights and activations).
const std::vector<EquivalenceMode>& EquivalenceModes();

/// The executor options both models' checks train with (`zero1` unset):
/// AdamW with weight decay and an epsilon that keeps rounding-level
/// gradient differences from moving the weights.
PlanExecutorOptions EquivalenceExecutorOptions();

/// One model's equivalence check: how to build it (the same initial weights
/// on every call for a dtype), the global batch and the executor's options
/// (EquivalenceExecutorOptions() unless set; their `zero1` is set per mode).
struct EquivalenceCase {
  std::string label;
  std::function<absl::StatusOr<std::shared_ptr<TrainableModel>>(
      torch::Dtype dtype)>
      make_model;
  std::function<SequenceInput(int sequence_index)> inputs_of;
  int64_t total_loss_tokens = 0;
  PlanExecutorOptions executor_options = EquivalenceExecutorOptions();
  /// A reference parameter with an all-zero gradient is an error (the
  /// check could not see it).
  bool require_nonzero_gradients = false;
};

/// The whole batch on one process (SingleProcessPlan()) in fp32 and in
/// bf16 (master weights, one shard), and how far apart bf16 rounding alone
/// puts them: the yardstick of the bf16 tolerances.
struct EquivalenceReferences {
  Snapshot fp32;
  /// Gradients: the float32 reduced gradient the bf16 step used.
  Snapshot bf16;
  /// Per parameter, max |bf16 gradient - fp32 gradient| over its elements.
  std::vector<double> gradient_spread;
  /// |bf16 loss - fp32 loss|.
  double loss_spread = 0;
};

absl::StatusOr<EquivalenceReferences> SingleProcessReferences(
    const EquivalenceCase& equivalence_case);

/// How many times the bf16 references' spread a bf16 plan may differ from
/// the fp32 reference (see the definition for the measurements).
double Bf16SpreadMultiple();

/// Runs `plan` in `mode` on `communicator` (every rank of its world calls
/// it alike; a FakeCommunicator for a plan of one rank) and compares the
/// step with the references:
///  - the reduced gradient (with ZeRO-1 gathered from every rank's shard):
///    in fp32 within 1e-5 of the fp32 reference's; in bf16, per parameter,
///    within Bf16SpreadMultiple() times the references' spread of the bf16
///    reference's (which starts from the same rounded weights);
///  - the parameters after the step: bitwise one non-sharded torch AdamW
///    step of the flat float32 initial weights on that reduced gradient,
///    cast to the model's dtype (the sharded update is the unsharded one);
///    in fp32 also within 1e-5 of the fp32 reference's;
///  - the loss (as the gradients), the all-to-all count of every
///    micro-batch, and that every rank holds the same parameters.
/// Prints the measured differences; INTERNAL naming the worst otherwise.
absl::Status RunPlanAndCompare(const EquivalenceCase& equivalence_case,
                               const EquivalenceReferences& references,
                               const Plan& plan, const EquivalenceMode& mode,
                               Communicator& communicator);
/// The same for a plan that re-groups the ranks within the step (the
/// all-to-all count checked per phase).
absl::Status RunPlanAndCompare(const EquivalenceCase& equivalence_case,
                               const EquivalenceReferences& references,
                               const PhasedPlan& plan,
                               const EquivalenceMode& mode,
                               Communicator& communicator);

/// The body of a rank main: computes the references, joins the Gloo world
/// of `context` and runs the plan named context.arg
/// (EquivalencePhasedPlanNamed) in every mode,
/// comparing each; the first failure, prefixed with its mode.
absl::Status RunPlanInEveryMode(const EquivalenceCase& equivalence_case,
                                const RankContext& context);

/// OK when, in every mode on one process, the whole batch passes
/// RunPlanAndCompare and a plan without sequence 7 fails it (the
/// tolerances can see a missing sequence, the bf16 one included).
absl::Status CheckMissingSequenceIsDetected(
    const EquivalenceCase& equivalence_case);

}  // namespace testing
}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_EQUIVALENCE_TEST_SUPPORT_H_
