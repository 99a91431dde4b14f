#include "worker/execution/equivalence_test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "worker/communication/c10d_test_world.h"
#include "worker/communication/fake_communicator.h"

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
      "sp2_sp2_packings", "phased_sp4_then_sp1_sp1_sp2"};
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

absl::StatusOr<PhasedPlan> EquivalencePhasedPlanNamed(
    const std::string& name) {
  PhasedPlan plan;
  plan.strategy = name;
  if (name == "phased_sp4_then_sp1_sp1_sp2") {
    Plan long_phase;
    long_phase.groups = {Group(
        {0, 1, 2, 3}, {MicroBatch({2}, 1), MicroBatch({4}, 0)})};
    Plan short_phase;
    short_phase.groups = {
        Group({0}, {MicroBatch({0}, 0), MicroBatch({7}, 1)}),
        Group({1}, {MicroBatch({1, 5}, 0)}),
        Group({2, 3}, {MicroBatch({3}, 2), MicroBatch({6}, 0)}),
    };
    plan.phases = {std::move(long_phase), std::move(short_phase)};
    return plan;
  }
  absl::StatusOr<Plan> one_layout = EquivalencePlanNamed(name);
  if (!one_layout.ok()) return one_layout.status();
  plan.phases.push_back(*std::move(one_layout));
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

const std::vector<EquivalenceMode>& EquivalenceModes() {
  static const std::vector<EquivalenceMode> modes = {
      {"fp32", torch::kFloat32, /*zero1=*/false},
      {"fp32_zero1", torch::kFloat32, /*zero1=*/true},
      {"bf16_zero1", torch::kBFloat16, /*zero1=*/true},
  };
  return modes;
}

PlanExecutorOptions EquivalenceExecutorOptions() {
  PlanExecutorOptions options;
  options.collective_timeout = absl::Seconds(30);
  options.learning_rate = 1e-3;
  options.weight_decay = 0.1;
  // Adam's first step moves each weight by lr * g / (|g| + eps): for a
  // gradient element near 0 it magnifies float rounding of g by up to
  // lr / eps. With eps = 1e-8 rounding-level gradient differences (~2e-8)
  // already move weights by ~2e-6; 1e-6 keeps that well under the fp32
  // tolerance without hiding real gradient errors, which the gradient check
  // sees first.
  options.adam_epsilon = 1e-6;
  return options;
}

double Bf16SpreadMultiple() {
  // The bf16 references' spread (max |bf16 - fp32| per parameter of the
  // one-process gradient, and of the loss) is what bf16 rounding alone
  // does to this batch; a plan changes only where and how often it rounds
  // (packings, micro-batch count, SP head splits, reduce-scatter order), so
  // its distance from the bf16 reference is of the same size. Measured
  // (OMP_NUM_THREADS=1, the four plans on 4 Gloo ranks): the worst
  // parameter's gradient differs from the bf16 reference by 1.4 x its
  // spread for the GPT and 1.0 x for the DiT, the loss by 1.1 x and 0.01 x;
  // a plan missing one sequence differs by 60 x (GPT) and 67 x (DiT) in a
  // gradient, 9 x and 1,460 x in the loss. 4 leaves the plans 2.8 x room and
  // still fails a missing sequence by far.
  return 4.0;
}

namespace {

constexpr double kFp32Tolerance = 1e-5;

std::vector<torch::Tensor> ParameterCopies(torch::nn::Module& model) {
  std::vector<torch::Tensor> copies;
  for (const torch::Tensor& p : model.parameters()) {
    copies.push_back(p.detach().clone());
  }
  return copies;
}

// The world's reduced gradient of the step `executor` took, per parameter
// (float32, the parameters' shapes): with ZeRO-1 gathered from every rank's
// shard, else the parameters' grad() (or the one flat shard).
absl::StatusOr<std::vector<torch::Tensor>> ReducedGradients(
    PlanExecutor& executor, bool zero1, Communicator& communicator) {
  std::vector<torch::Tensor> parameters = executor.model().parameters();
  std::vector<torch::Tensor> gradients;
  if (!executor.has_master_weights()) {
    for (const torch::Tensor& p : parameters) {
      gradients.push_back(p.grad().detach().to(torch::kFloat32));
    }
    return gradients;
  }
  torch::Tensor shard = executor.reduced_gradient_shard().contiguous();
  torch::Tensor flat = shard;
  if (zero1 && communicator.world_size() > 1) {
    flat = torch::empty({shard.numel() * communicator.world_size()},
                        shard.options());
    if (absl::Status status =
            communicator.World().AllGather(shard, flat, absl::Seconds(30));
        !status.ok()) {
      return status;
    }
  }
  int64_t offset = 0;
  for (const torch::Tensor& p : parameters) {
    gradients.push_back(
        flat.narrow(0, offset, p.numel()).view(p.sizes()).clone());
    offset += p.numel();
  }
  return gradients;
}

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64))
      .abs()
      .max()
      .item<double>();
}

// One torch AdamW step (`options`' hyper-parameters) of the flat float32
// copy of `initial` with the flat `gradients`, cast back to each
// parameter's dtype and shape.
std::vector<torch::Tensor> UnshardedAdamWStep(
    const std::vector<torch::Tensor>& initial,
    const std::vector<torch::Tensor>& gradients,
    const PlanExecutorOptions& options) {
  std::vector<torch::Tensor> flat_weights, flat_gradients;
  for (size_t i = 0; i < initial.size(); ++i) {
    flat_weights.push_back(initial[i].reshape({-1}).to(torch::kFloat32));
    flat_gradients.push_back(gradients[i].reshape({-1}).to(torch::kFloat32));
  }
  torch::Tensor weights = torch::cat(flat_weights);
  weights.mutable_grad() = torch::cat(flat_gradients);
  torch::optim::AdamW adamw(
      std::vector<torch::Tensor>{weights},
      torch::optim::AdamWOptions(options.learning_rate)
          .betas({options.adam_beta1, options.adam_beta2})
          .eps(options.adam_epsilon)
          .weight_decay(options.weight_decay));
  adamw.step();
  std::vector<torch::Tensor> updated;
  int64_t offset = 0;
  for (const torch::Tensor& p : initial) {
    updated.push_back(weights.detach()
                          .narrow(0, offset, p.numel())
                          .view(p.sizes())
                          .to(p.scalar_type()));
    offset += p.numel();
  }
  return updated;
}

// The largest difference of one check over the parameters, as a ratio of
// what it may be (allowed 0: must be exactly 0).
struct WorstDifference {
  double ratio = 0;
  double value = 0;
  std::string name;

  void Add(double diff, double allowed, const std::string& parameter) {
    const double r = allowed > 0 ? diff / allowed : (diff > 0 ? 1e30 : 0);
    if (r > ratio || name.empty()) {
      ratio = r;
      value = diff;
      name = parameter;
    }
  }
  bool within() const { return ratio <= 1; }
};

struct ModeRun {
  std::shared_ptr<TrainableModel> model;
  std::vector<torch::Tensor> initial_parameters;
  std::vector<torch::Tensor> reduced_gradients;
  StepResult result;
};

absl::StatusOr<ModeRun> RunMode(const EquivalenceCase& equivalence_case,
                                const PhasedPlan& plan,
                                const EquivalenceMode& mode,
                                Communicator& communicator) {
  ModeRun run;
  absl::StatusOr<std::shared_ptr<TrainableModel>> model =
      equivalence_case.make_model(mode.dtype);
  if (!model.ok()) return model.status();
  run.model = *std::move(model);
  run.initial_parameters = ParameterCopies(*run.model);
  PlanExecutorOptions options = equivalence_case.executor_options;
  options.zero1 = mode.zero1;
  PlanExecutor executor(run.model, communicator, options);
  absl::StatusOr<StepResult> result = executor.RunStep(
      plan, equivalence_case.inputs_of, equivalence_case.total_loss_tokens);
  if (!result.ok()) return result.status();
  run.result = *std::move(result);
  absl::StatusOr<std::vector<torch::Tensor>> gradients =
      ReducedGradients(executor, mode.zero1, communicator);
  if (!gradients.ok()) return gradients.status();
  run.reduced_gradients = *std::move(gradients);
  return run;
}

// Ulysses: two all-to-alls per layer forward and backward, plus the re-run
// of the recomputed layers' forward.
absl::Status CheckAllToAllCalls(const PhasedPlan& plan,
                                const StepResult& result, int64_t layers) {
  if (result.phase_group_indices.size() != plan.phases.size()) {
    return absl::InternalError("step result does not match the plan's phases");
  }
  size_t expected_micro_batches = 0;
  for (size_t p = 0; p < plan.phases.size(); ++p) {
    expected_micro_batches += plan.phases[p]
                                  .groups[result.phase_group_indices[p]]
                                  .micro_batches.size();
  }
  const GroupPlan& first = plan.phases[0].groups[result.group_index];
  if (result.micro_batches.size() != expected_micro_batches ||
      result.sp_size != first.sp_size()) {
    return absl::InternalError("step result does not match the plan's group");
  }
  for (const MicroBatchResult& micro_batch : result.micro_batches) {
    const int sp_size = plan.phases[micro_batch.phase]
                            .groups[result.phase_group_indices[micro_batch.phase]]
                            .sp_size();
    const int64_t expected =
        sp_size == 1
            ? 0
            : 4 * layers + 2 * std::min<int64_t>(
                                   micro_batch.checkpointed_layers, layers);
    if (micro_batch.all_to_all_calls != expected) {
      return absl::InternalError(
          absl::StrCat("micro-batch of phase ", micro_batch.phase, " made ",
                       micro_batch.all_to_all_calls, " all-to-alls; expected ",
                       expected));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EquivalenceReferences> SingleProcessReferences(
    const EquivalenceCase& equivalence_case) {
  PhasedPlan plan;
  plan.phases.push_back(SingleProcessPlan());
  EquivalenceReferences references;
  FakeCommunicator communicator;
  for (const EquivalenceMode& mode :
       {EquivalenceMode{"fp32", torch::kFloat32, false},
        EquivalenceMode{"bf16", torch::kBFloat16, false}}) {
    absl::StatusOr<ModeRun> run =
        RunMode(equivalence_case, plan, mode, communicator);
    if (!run.ok()) return run.status();
    Snapshot snapshot = TakeSnapshot(*run->model, run->result.global_loss);
    snapshot.gradients = run->reduced_gradients;
    (mode.dtype == torch::kFloat32 ? references.fp32 : references.bf16) =
        std::move(snapshot);
  }
  for (size_t i = 0; i < references.fp32.names.size(); ++i) {
    references.gradient_spread.push_back(MaxAbsDiff(
        references.bf16.gradients[i], references.fp32.gradients[i]));
  }
  references.loss_spread =
      std::abs(references.bf16.global_loss - references.fp32.global_loss);
  return references;
}

absl::Status RunPlanAndCompare(const EquivalenceCase& equivalence_case,
                               const EquivalenceReferences& references,
                               const Plan& plan, const EquivalenceMode& mode,
                               Communicator& communicator) {
  return RunPlanAndCompare(equivalence_case, references, AsOnePhase(plan), mode,
                           communicator);
}

absl::Status RunPlanAndCompare(const EquivalenceCase& equivalence_case,
                               const EquivalenceReferences& references,
                               const PhasedPlan& plan,
                               const EquivalenceMode& mode,
                               Communicator& communicator) {
  absl::StatusOr<ModeRun> run =
      RunMode(equivalence_case, plan, mode, communicator);
  if (!run.ok()) return run.status();
  if (absl::Status status = CheckAllToAllCalls(
          plan, run->result, run->model->spec().num_layers);
      !status.ok()) {
    return status;
  }
  const bool bf16 = mode.dtype != torch::kFloat32;
  // bf16 plans are compared with the bf16 reference, which shares their
  // rounded initial weights: what may differ is the rounding on the way.
  const Snapshot& reference = bf16 ? references.bf16 : references.fp32;
  const std::vector<torch::Tensor> unsharded =
      UnshardedAdamWStep(run->initial_parameters, run->reduced_gradients,
                         equivalence_case.executor_options);
  const std::vector<torch::Tensor> parameters = ParameterCopies(*run->model);
  WorstDifference gradient, step, parameter;
  double smallest_gradient = 1e30;
  for (size_t i = 0; i < reference.names.size(); ++i) {
    const std::string& name = reference.names[i];
    smallest_gradient =
        std::min(smallest_gradient,
                 references.fp32.gradients[i].abs().max().item<double>());
    gradient.Add(
        MaxAbsDiff(run->reduced_gradients[i], reference.gradients[i]),
        bf16 ? Bf16SpreadMultiple() * references.gradient_spread[i]
             : kFp32Tolerance,
        name);
    // The same elementwise float32 arithmetic on a shard as on the whole
    // flat buffer: measured bitwise equal in every mode and plan.
    step.Add(MaxAbsDiff(parameters[i], unsharded[i]), /*allowed=*/0, name);
    if (!bf16) {
      parameter.Add(MaxAbsDiff(parameters[i], reference.parameters[i]),
                    kFp32Tolerance, name);
    }
  }
  const double loss_diff =
      std::abs(run->result.global_loss - reference.global_loss);
  const double loss_allowed =
      bf16 ? Bf16SpreadMultiple() * references.loss_spread : kFp32Tolerance;
  std::printf(
      "[rank %d] %s %s: reduced gradient max |diff| %.3g (%s, %.2f of the "
      "allowed %s); after the step max |param - one unsharded AdamW step| "
      "%.3g (%s); max |param - fp32 reference| %.3g (%s); loss %.9f vs "
      "%.9f (%.2f of the allowed)\n",
      communicator.rank(), equivalence_case.label.c_str(), mode.name.c_str(),
      gradient.value, gradient.name.c_str(), gradient.ratio,
      bf16 ? "4 x the bf16 spread" : "1e-5", step.value, step.name.c_str(),
      parameter.value, bf16 ? "not compared" : parameter.name.c_str(),
      run->result.global_loss, reference.global_loss,
      loss_allowed > 0 ? loss_diff / loss_allowed : 0.0);
  std::fflush(stdout);
  if (equivalence_case.require_nonzero_gradients && !(smallest_gradient > 0)) {
    return absl::InternalError(
        "a parameter of the reference has an all-zero gradient; the check "
        "would not see it");
  }
  if (!gradient.within() || !step.within() || !parameter.within() ||
      !(loss_diff <= loss_allowed)) {
    return absl::InternalError(absl::StrCat(
        equivalence_case.label, " ", mode.name, ": plan '", plan.strategy,
        "' differs from the single-process reference: reduced gradient of ",
        gradient.name, " by ", gradient.value, " (", gradient.ratio,
        " times the allowed); ", step.name,
        " after the step differs from one unsharded AdamW step by ",
        step.value, "; ", parameter.name, " from the fp32 reference by ",
        parameter.value, "; loss ", run->result.global_loss, " vs ",
        reference.global_loss, " (allowed ", loss_allowed, ")"));
  }
  return CheckRanksAgree(communicator, *run->model);
}

absl::Status RunPlanInEveryMode(const EquivalenceCase& equivalence_case,
                                const RankContext& context) {
  // The references first, before any collective, in every rank.
  absl::StatusOr<EquivalenceReferences> references =
      SingleProcessReferences(equivalence_case);
  if (!references.ok()) return references.status();
  absl::StatusOr<PhasedPlan> plan = EquivalencePhasedPlanNamed(context.arg);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      JoinC10dTestWorld(context,
                        absl::StrCat(equivalence_case.label,
                                     "_gradient_equivalence_", context.arg),
                        absl::Seconds(30));
  if (!communicator.ok()) return communicator.status();
  for (const EquivalenceMode& mode : EquivalenceModes()) {
    absl::Status status = RunPlanAndCompare(equivalence_case, *references,
                                            *plan, mode, **communicator);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("mode ", mode.name, ": ",
                                                      status.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMissingSequenceIsDetected(
    const EquivalenceCase& equivalence_case) {
  absl::StatusOr<EquivalenceReferences> references =
      SingleProcessReferences(equivalence_case);
  if (!references.ok()) return references.status();
  FakeCommunicator communicator;
  Plan missing;
  missing.strategy = "missing_sequence_7";
  missing.groups = {Group({0}, {MicroBatch({0, 1, 2, 3, 4, 5, 6}, 0)})};
  for (const EquivalenceMode& mode : EquivalenceModes()) {
    if (absl::Status whole =
            RunPlanAndCompare(equivalence_case, *references,
                              SingleProcessPlan(), mode, communicator);
        !whole.ok()) {
      return absl::Status(whole.code(),
                          absl::StrCat("mode ", mode.name,
                                       ", the whole batch: ", whole.message()));
    }
    if (RunPlanAndCompare(equivalence_case, *references, missing, mode,
                          communicator)
            .ok()) {
      return absl::InternalError(absl::StrCat(
          "mode ", mode.name, ": a plan without sequence 7 passed"));
    }
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace dcp
