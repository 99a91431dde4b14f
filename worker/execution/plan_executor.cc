#include "worker/execution/plan_executor.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/execution/device_sync.h"
#include "worker/execution/peak_allocated_bytes.h"

namespace dcp {
namespace {

torch::optim::AdamWOptions AdamWOptionsFrom(const PlanExecutorOptions& o) {
  return torch::optim::AdamWOptions(o.learning_rate)
      .betas({o.adam_beta1, o.adam_beta2})
      .eps(o.adam_epsilon)
      .weight_decay(o.weight_decay);
}

int64_t Bytes(const torch::Tensor& tensor) {
  return tensor.defined() ? static_cast<int64_t>(tensor.nbytes()) : 0;
}

}  // namespace

PlanExecutor::PlanExecutor(std::shared_ptr<TrainableModel> model,
                           Communicator& communicator,
                           PlanExecutorOptions options)
    : model_(std::move(model)),
      communicator_(communicator),
      options_(options),
      clock_(options.clock != nullptr ? options.clock : &RealClock::Get()),
      wait_for_device_(DeviceWaiter(model_->parameters().front().device(),
                                    options.wait_for_device)) {
  const bool float32 =
      model_->parameters().front().scalar_type() == torch::kFloat32;
  if (float32 && !options_.zero1) {
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        model_->parameters(), AdamWOptionsFrom(options_));
    return;
  }
  FlattenParameters();
  optimizer_ = std::make_unique<torch::optim::AdamW>(
      std::vector<torch::Tensor>{master_}, AdamWOptionsFrom(options_));
}

absl::Time PlanExecutor::DeviceNow() const {
  if (wait_for_device_) wait_for_device_();
  return clock_->MonotonicNow();
}

void PlanExecutor::FlattenParameters() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parameters = model_->parameters();
  int64_t total = 0;
  for (const torch::Tensor& p : parameters) total += p.numel();
  num_parameter_elements_ = total;
  const int64_t shards = options_.zero1 ? communicator_.world_size() : 1;
  shard_size_ = (total + shards - 1) / shards;
  shard_offset_ = options_.zero1 ? communicator_.rank() * shard_size_ : 0;
  const torch::Tensor& first = parameters.front();
  flat_parameters_ = torch::zeros({shards * shard_size_}, first.options());
  flat_gradients_ = torch::zeros({shards * shard_size_},
                                 first.options().dtype(torch::kFloat32));
  int64_t offset = 0;
  for (torch::Tensor& p : parameters) {
    const int64_t n = p.numel();
    torch::Tensor weights = flat_parameters_.narrow(0, offset, n);
    weights.copy_(p.detach().reshape({-1}));
    p.set_data(weights.view(p.sizes()));
    // Backward adds each micro-batch's gradient (in the compute dtype) into
    // this float32 view in place.
    p.mutable_grad() = flat_gradients_.narrow(0, offset, n).view(p.sizes());
    offset += n;
  }
  master_ = flat_parameters_.narrow(0, shard_offset_, shard_size_)
                .to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
}

torch::Tensor PlanExecutor::reduced_gradient_shard() const {
  if (!master_.defined()) return torch::Tensor();
  return flat_gradients_.narrow(0, shard_offset_, shard_size_);
}

absl::StatusOr<MasterWeightState> PlanExecutor::GatherMasterWeightState(
    bool keep) {
  if (!master_.defined()) {
    return absl::FailedPreconditionError(
        "GatherMasterWeightState: this executor keeps no master weights (a "
        "float32 model without ZeRO-1); save the optimizer's own state");
  }
  torch::NoGradGuard no_grad;
  const int64_t shards = flat_gradients_.numel() / shard_size_;
  MasterWeightState state;
  torch::Tensor exp_avg = torch::zeros_like(master_);
  torch::Tensor exp_avg_sq = torch::zeros_like(master_);
  for (const auto& [key, param_state] : optimizer_->state()) {
    const auto& adam =
        static_cast<const torch::optim::AdamWParamState&>(*param_state);
    exp_avg = adam.exp_avg();
    exp_avg_sq = adam.exp_avg_sq();
    state.adam_step = adam.step();
  }
  const torch::TensorOptions cpu =
      torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCPU);
  std::vector<torch::Tensor*> wholes = {
      &state.master_weights, &state.exp_avg, &state.exp_avg_sq};
  const std::vector<torch::Tensor> mine = {master_, exp_avg, exp_avg_sq};
  // Shard position [begin, begin + n) of every rank at once: rank r's lands
  // at r * shard_size_ + begin of the whole.
  const int64_t chunk = std::max<int64_t>(
      1, options_.all_reduce_bucket_bytes /
             (shards * static_cast<int64_t>(sizeof(float))));
  for (size_t t = 0; t < mine.size(); ++t) {
    torch::Tensor whole;
    if (keep) whole = torch::empty({shards * shard_size_}, cpu);
    for (int64_t begin = 0; begin < shard_size_; begin += chunk) {
      const int64_t n = std::min(chunk, shard_size_ - begin);
      torch::Tensor piece = mine[t].narrow(0, begin, n).contiguous();
      torch::Tensor gathered = piece;
      if (shards > 1) {
        gathered = torch::empty({shards * n}, piece.options());
        if (absl::Status status = communicator_.World().AllGather(
                piece, gathered, options_.collective_timeout);
            !status.ok()) {
          return status;
        }
      }
      if (!keep) continue;
      torch::Tensor on_cpu = gathered.to(torch::kCPU).view({shards, n});
      whole.view({shards, shard_size_}).narrow(1, begin, n).copy_(on_cpu);
    }
    if (keep) *wholes[t] = whole.narrow(0, 0, num_parameter_elements_).clone();
  }
  return state;
}

absl::Status PlanExecutor::LoadMasterWeightState(
    const MasterWeightState& state) {
  if (!master_.defined()) {
    return absl::FailedPreconditionError(
        "LoadMasterWeightState: this executor keeps no master weights (a "
        "float32 model without ZeRO-1)");
  }
  for (const torch::Tensor* tensor :
       {&state.master_weights, &state.exp_avg, &state.exp_avg_sq}) {
    if (!tensor->defined() || tensor->dim() != 1 ||
        tensor->numel() != num_parameter_elements_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the saved master weights and AdamW moments have ",
          tensor->defined() ? tensor->numel() : 0,
          " elements but this model has ", num_parameter_elements_,
          " parameter elements; resume with the model it was saved for"));
    }
  }
  if (state.adam_step < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the saved AdamW step count is ", state.adam_step));
  }
  torch::NoGradGuard no_grad;
  const torch::TensorOptions options = master_.options();
  // This rank's shard of each whole, zero-padded past the parameters.
  auto shard_of = [&](const torch::Tensor& whole) {
    torch::Tensor padded = torch::zeros({flat_parameters_.numel()}, options);
    padded.narrow(0, 0, num_parameter_elements_)
        .copy_(whole.to(options.device()).to(torch::kFloat32));
    return padded;
  };
  const torch::Tensor weights = shard_of(state.master_weights);
  master_.copy_(weights.narrow(0, shard_offset_, shard_size_));
  flat_parameters_.copy_(weights.to(flat_parameters_.scalar_type()));
  optimizer_->state().erase(master_.unsafeGetTensorImpl());
  if (state.adam_step > 0) {
    auto adam = std::make_unique<torch::optim::AdamWParamState>();
    adam->step(state.adam_step);
    adam->exp_avg(
        shard_of(state.exp_avg).narrow(0, shard_offset_, shard_size_).clone());
    adam->exp_avg_sq(shard_of(state.exp_avg_sq)
                         .narrow(0, shard_offset_, shard_size_)
                         .clone());
    optimizer_->state()[master_.unsafeGetTensorImpl()] = std::move(adam);
  }
  return absl::OkStatus();
}

TrainingStateBytes PlanExecutor::HeldStateBytes() const {
  TrainingStateBytes bytes;
  if (master_.defined()) {
    bytes.parameter_bytes = Bytes(flat_parameters_);
    bytes.gradient_bytes = Bytes(flat_gradients_);
    bytes.optimizer_bytes = Bytes(master_);
  } else {
    for (const torch::Tensor& p : model_->parameters()) {
      bytes.parameter_bytes += Bytes(p);
      bytes.gradient_bytes += Bytes(p.grad());
    }
  }
  for (const auto& [key, state] : optimizer_->state()) {
    const auto& adam =
        static_cast<const torch::optim::AdamWParamState&>(*state);
    bytes.optimizer_bytes += Bytes(adam.exp_avg()) + Bytes(adam.exp_avg_sq()) +
                             Bytes(adam.max_exp_avg_sq());
  }
  return bytes;
}

absl::StatusOr<StepResult> PlanExecutor::RunStep(
    const Plan& plan,
    const std::function<std::vector<int64_t>(int sequence_index)>& tokens_of,
    int64_t total_loss_tokens) {
  return RunStep(
      plan,
      [&tokens_of](int index) {
        SequenceInput input;
        input.token_ids = tokens_of(index);
        return input;
      },
      total_loss_tokens);
}

absl::StatusOr<StepResult> PlanExecutor::RunStep(
    const Plan& plan,
    const std::function<SequenceInput(int sequence_index)>& inputs_of,
    int64_t total_loss_tokens) {
  return RunStep(AsOnePhase(plan), inputs_of, total_loss_tokens);
}

absl::StatusOr<StepResult> PlanExecutor::RunStep(
    const PhasedPlan& plan,
    const std::function<SequenceInput(int sequence_index)>& inputs_of,
    int64_t total_loss_tokens) {
  if (total_loss_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "total_loss_tokens is ", total_loss_tokens,
        "; pass the number of predicted tokens of the whole global batch "
        "(the sum of the model's LossTokensOfSequence: the sequence lengths "
        "minus one per sequence for the GPT, the lengths for the DiT), which "
        "must be > 0"));
  }
  if (plan.phases.empty()) {
    return absl::InvalidArgumentError(
        "the plan has no phases; give it at least one layout of the ranks");
  }
  const int rank = communicator_.rank();
  const bool phased = plan.phases.size() > 1;
  StepResult result;
  // Every phase places this rank exactly once, on an SP size the model
  // takes, before anything runs.
  std::vector<std::vector<int>> groups_of_step;
  for (size_t p = 0; p < plan.phases.size(); ++p) {
    const Plan& phase = plan.phases[p];
    const std::string where =
        phased ? absl::StrCat(" of phase ", p) : std::string();
    int group_index = -1;
    for (size_t g = 0; g < phase.groups.size(); ++g) {
      const std::vector<int>& ranks = phase.groups[g].ranks;
      if (std::find(groups_of_step.begin(), groups_of_step.end(), ranks) ==
          groups_of_step.end()) {
        groups_of_step.push_back(ranks);
      }
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) continue;
      if (group_index >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rank ", rank, " is in SP groups ", group_index, " and ", g, where,
            " of the plan; each rank must be in exactly one group"));
      }
      group_index = static_cast<int>(g);
    }
    if (group_index < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, " is in none of the plan's ", phase.groups.size(),
          " SP groups", where, "; a plan must place every rank of the world ",
          "(size ", communicator_.world_size(), ") in exactly one group"));
    }
    if (absl::Status status = model_->CheckSequenceParallelSize(
            phase.groups[group_index].sp_size());
        !status.ok()) {
      return status;
    }
  }
  // Every rank announces the same groups (of every phase), so that a
  // bounded group cache releases groups alike on all their members.
  if (absl::Status status = communicator_.UseGroups(groups_of_step);
      !status.ok()) {
    return status;
  }

  model_->train();
  if (master_.defined()) {
    flat_gradients_.zero_();
  } else {
    for (torch::Tensor& p : model_->parameters()) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  }
  const torch::Device device = model_->parameters().front().device();

  const double inverse_total = 1.0 / static_cast<double>(total_loss_tokens);
  for (size_t p = 0; p < plan.phases.size(); ++p) {
    if (p > 0 && plan.barriers) {
      // The next layout starts when every rank has finished this one.
      // Without barriers (Megatron's dev-branch dynamic CP) a rank goes on
      // to its next group at once; that group's collectives wait for its
      // other members.
      const absl::Time barrier_start = DeviceNow();
      if (absl::Status status =
              communicator_.World().Barrier(options_.collective_timeout);
          !status.ok()) {
        return status;
      }
      result.phase_barrier_seconds +=
          absl::ToDoubleSeconds(DeviceNow() - barrier_start);
    }
    if (absl::Status status = RunPhase(plan.phases[p], static_cast<int>(p),
                                       inputs_of, inverse_total, result);
        !status.ok()) {
      return status;
    }
  }

  // Each micro-batch measured its own peak (restarting the device's peak
  // statistic); the step's peak is the largest of those and of what follows.
  const PeakAllocatedBytes after_micro_batches(device);
  if (master_.defined()) {
    if (absl::Status status = MasterWeightStep(result); !status.ok()) {
      return status;
    }
  } else {
    const absl::Time allreduce_start = DeviceNow();
    if (absl::Status status = AllReduceGradients(); !status.ok()) return status;
    result.gradient_allreduce_seconds =
        absl::ToDoubleSeconds(DeviceNow() - allreduce_start);
    try {
      optimizer_->step();
    } catch (...) {
      return StatusFromCurrentException("AdamW step");
    }
  }

  // On the parameters' device: NCCL reduces only device tensors.
  torch::Tensor loss = torch::tensor(
      {result.local_loss},
      torch::TensorOptions().dtype(torch::kFloat64).device(device));
  if (absl::Status status =
          communicator_.World().AllReduceSum(loss, options_.collective_timeout);
      !status.ok()) {
    return status;
  }
  result.global_loss = loss.cpu().item<double>();
  if (after_micro_batches.measured()) {
    result.peak_allocated_bytes = after_micro_batches.Peak();
    for (const MicroBatchResult& micro : result.micro_batches) {
      result.peak_allocated_bytes =
          std::max(result.peak_allocated_bytes, micro.peak_allocated_bytes);
    }
  }
  return result;
}

absl::Status PlanExecutor::RunPhase(
    const Plan& phase, int phase_index,
    const std::function<SequenceInput(int sequence_index)>& inputs_of,
    double inverse_total, StepResult& result) {
  const int rank = communicator_.rank();
  int group_index = -1;
  for (size_t g = 0; g < phase.groups.size() && group_index < 0; ++g) {
    const std::vector<int>& ranks = phase.groups[g].ranks;
    if (std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) {
      group_index = static_cast<int>(g);
    }
  }
  // RunStep checked that every phase places this rank once.
  const GroupPlan& group_plan = phase.groups[group_index];
  absl::StatusOr<CommGroup*> group = communicator_.Group(group_plan.ranks);
  if (!group.ok()) return group.status();
  result.phase_group_indices.push_back(group_index);
  if (phase_index == 0) {
    result.group_index = group_index;
    result.sp_size = (*group)->size();
    result.sp_rank = (*group)->rank();
  }
  const std::string group_name =
      phase_index == 0 ? absl::StrCat("group ", group_index)
                       : absl::StrCat("group ", group_index, " of phase ",
                                      phase_index);
  const torch::Device device = model_->parameters().front().device();
  for (size_t m = 0; m < group_plan.micro_batches.size(); ++m) {
    const MicroBatchPlan& micro_batch = group_plan.micro_batches[m];
    const absl::Time start = DeviceNow();
    std::vector<SequenceInput> sequences;
    sequences.reserve(micro_batch.sequence_indices.size());
    for (int index : micro_batch.sequence_indices) {
      sequences.push_back(inputs_of(index));
      if (sequences.back().length_tokens() == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", index, " (micro-batch ", m, " of ",
                         group_name, ") has no tokens"));
      }
    }
    MicroBatchResult micro_result;
    micro_result.phase = phase_index;
    micro_result.num_sequences = static_cast<int>(sequences.size());
    micro_result.checkpointed_layers = micro_batch.checkpointed_layers;
    if (sequences.empty()) {
      result.micro_batches.push_back(micro_result);
      continue;  // Nothing to run, on any member alike.
    }
    SequenceParallelContext sp;
    sp.group = *group;
    sp.timeout = options_.collective_timeout;
    sp.clock = clock_;
    sp.stats = std::make_shared<CommunicationStats>();
    sp.wait_for_device = wait_for_device_;
    const PeakAllocatedBytes peak(device);
    absl::StatusOr<ShardLoss> shard_loss =
        model_->ShardLossSum(sequences, sp, micro_batch.checkpointed_layers);
    if (!shard_loss.ok()) return shard_loss.status();
    micro_result.local_tokens = shard_loss->local_tokens;
    micro_result.predicted_tokens = shard_loss->loss_tokens;
    micro_result.real_tokens = shard_loss->real_tokens;
    try {
      torch::Tensor loss = shard_loss->loss_sum * inverse_total;
      loss.backward();
      micro_result.loss = loss.item<double>();
      shard_loss->loss_sum = torch::Tensor();
    } catch (...) {
      return StatusFromCurrentException(
          absl::StrCat("backward of micro-batch ", m, " of ", group_name)
              .c_str());
    }
    micro_result.peak_allocated_bytes = peak.Peak();
    const absl::Duration elapsed = DeviceNow() - start;
    micro_result.communication_seconds =
        absl::ToDoubleSeconds(sp.stats->all_to_all_time);
    micro_result.compute_seconds =
        absl::ToDoubleSeconds(elapsed - sp.stats->all_to_all_time);
    micro_result.all_to_all_calls = sp.stats->all_to_all_calls;
    result.local_loss += micro_result.loss;
    result.micro_batches.push_back(micro_result);
  }

  return absl::OkStatus();
}

absl::Status PlanExecutor::MasterWeightStep(StepResult& result) {
  torch::NoGradGuard no_grad;
  const int64_t shards = flat_gradients_.numel() / shard_size_;
  const absl::Time reduce_start = DeviceNow();
  torch::Tensor shard_gradient = reduced_gradient_shard();
  if (shards == 1) {
    // The whole flat buffer, all-reduced in bucket-sized slices.
    const int64_t bucket = std::max<int64_t>(
        1, options_.all_reduce_bucket_bytes /
               static_cast<int64_t>(flat_gradients_.element_size()));
    for (int64_t begin = 0; begin < flat_gradients_.numel(); begin += bucket) {
      torch::Tensor slice = flat_gradients_.narrow(
          0, begin, std::min(bucket, flat_gradients_.numel() - begin));
      if (absl::Status status = communicator_.World().AllReduceSum(
              slice, options_.collective_timeout);
          !status.ok()) {
        return status;
      }
    }
  } else {
    // The sum of this rank's shard lands in a separate buffer (input and
    // output of a reduce-scatter must not overlap), then replaces the local
    // shard, which nothing needs any more.
    torch::Tensor summed = torch::empty_like(shard_gradient);
    if (absl::Status status = communicator_.World().ReduceScatterSum(
            flat_gradients_, summed, options_.collective_timeout);
        !status.ok()) {
      return status;
    }
    shard_gradient.copy_(summed);
  }
  result.gradient_allreduce_seconds =
      absl::ToDoubleSeconds(DeviceNow() - reduce_start);

  master_.mutable_grad() = shard_gradient;
  try {
    optimizer_->step();
  } catch (...) {
    master_.mutable_grad() = torch::Tensor();
    return StatusFromCurrentException("AdamW step on the master shard");
  }
  master_.mutable_grad() = torch::Tensor();

  const absl::Time gather_start = DeviceNow();
  torch::Tensor updated = master_.to(flat_parameters_.scalar_type());
  if (shards == 1) {
    flat_parameters_.copy_(updated);
  } else if (absl::Status status = communicator_.World().AllGather(
                 updated, flat_parameters_, options_.collective_timeout);
             !status.ok()) {
    return status;
  }
  result.weight_allgather_seconds =
      absl::ToDoubleSeconds(DeviceNow() - gather_start);
  return absl::OkStatus();
}

absl::Status PlanExecutor::AllReduceGradients() {
  std::vector<torch::Tensor> parameters = model_->parameters();
  for (torch::Tensor& p : parameters) {
    // A rank with no micro-batches still contributes (zeros), in the same
    // order and shape as every other rank.
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
  // Buckets of consecutive parameters: every rank cuts them identically.
  size_t begin = 0;
  while (begin < parameters.size()) {
    size_t end = begin;
    int64_t bytes = 0;
    do {
      bytes += parameters[end].numel() *
               static_cast<int64_t>(parameters[end].element_size());
      ++end;
    } while (end < parameters.size() &&
             bytes + parameters[end].numel() *
                         static_cast<int64_t>(parameters[end].element_size()) <=
                 options_.all_reduce_bucket_bytes);
    std::vector<torch::Tensor> flat_grads;
    flat_grads.reserve(end - begin);
    for (size_t i = begin; i < end; ++i) {
      flat_grads.push_back(parameters[i].grad().reshape({-1}));
    }
    torch::Tensor bucket = torch::cat(flat_grads);
    if (absl::Status status = communicator_.World().AllReduceSum(
            bucket, options_.collective_timeout);
        !status.ok()) {
      return status;
    }
    int64_t offset = 0;
    for (size_t i = begin; i < end; ++i) {
      torch::Tensor& p = parameters[i];
      const int64_t n = p.numel();
      p.mutable_grad().copy_(bucket.narrow(0, offset, n).view_as(p));
      offset += n;
    }
    begin = end;
  }
  return absl::OkStatus();
}

}  // namespace dcp
