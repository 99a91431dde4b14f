#include "worker/execution/micro_batch_profiler.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "cost_model/micro_batch_shape.h"
#include "worker/communication/sequence_parallel.h"
#include "worker/execution/model.h"
#include "worker/execution/model_kind.h"

namespace dcp {
namespace {

/// The model the plan executor trains, with its synthetic inputs.
absl::StatusOr<SyntheticTrainingModel> TrainingModel(
    const ModelSpec& model, const ProfileOptions& options) {
  GptModelOptions model_options;
  model_options.seed = options.seed;
  model_options.dtype = options.dtype;
  model_options.device = options.device;
  return CreateSyntheticTrainingModel(model, model_options);
}

/// `count` synthetic sequences of `length` tokens (sample ids from
/// `sample_id` on, which advances) and their shape on an SP group of
/// `sp_size`.
struct SyntheticMicroBatch {
  std::vector<SequenceInput> sequences;
  MicroBatchShape shape;
};
absl::StatusOr<SyntheticMicroBatch> MakeMicroBatch(SequenceInputSource& inputs,
                                                   int count, int64_t length,
                                                   int sp_size,
                                                   int64_t& sample_id) {
  SyntheticMicroBatch micro_batch;
  micro_batch.shape.sp_size = sp_size;
  for (int i = 0; i < count; ++i) {
    DCP_ASSIGN_OR_RETURN(SequenceInput input,
                         inputs.Input(sample_id++, length));
    micro_batch.sequences.push_back(std::move(input));
    micro_batch.shape.AddSequence(length);
  }
  return micro_batch;
}

std::vector<int> CheckpointedLayerCounts(const ModelSpec& model,
                                         const ProfileOptions& options) {
  return options.micro_batch_checkpointed_layers.value_or(
      std::vector<int>{0, model.num_layers});
}

}  // namespace

absl::Status ProfileMicroBatches(const ModelSpec& model,
                                 const ProfileOptions& options,
                                 const ProfileTimer& timer,
                                 std::vector<ProfileSample>& samples) {
  if (options.micro_batch_shapes.empty() && !options.optimizer_step) {
    return absl::OkStatus();
  }
  DCP_ASSIGN_OR_RETURN(SyntheticTrainingModel built,
                       TrainingModel(model, options));
  const std::shared_ptr<TrainableModel> trainable = std::move(built.model);
  const std::unique_ptr<SequenceInputSource> inputs = std::move(built.inputs);
  const std::vector<int> checkpointed = CheckpointedLayerCounts(model, options);
  int64_t sample_id = 0;
  for (const auto& [sequences, length] : options.micro_batch_shapes) {
    DCP_ASSIGN_OR_RETURN(
        SyntheticMicroBatch micro_batch,
        MakeMicroBatch(*inputs, sequences, length, /*sp_size=*/1, sample_id));
    const std::vector<SequenceInput>& batch = micro_batch.sequences;
    const MicroBatchShape& shape = micro_batch.shape;
    for (int layers : checkpointed) {
      auto run = [&]() -> absl::Status {
        absl::StatusOr<ShardLoss> loss =
            trainable->ShardLossSum(batch, SequenceParallelContext(), layers);
        if (!loss.ok()) return loss.status();
        (loss->loss_sum * (1.0 / static_cast<double>(loss->loss_tokens)))
            .backward();
        return absl::OkStatus();
      };
      DCP_ASSIGN_OR_RETURN(
          const std::vector<double> seconds,
          timer.TimedSeconds(
              absl::StrCat("micro-batch of ", sequences, " x ", length,
                           " tokens, ", layers, " layers recomputed"),
              NoPreparation, run));
      // The mean, as for the SP micro-batches: a step pays every one.
      samples.push_back(MicroBatchSample(shape, layers, MeanOf(seconds)));
    }
  }
  if (options.optimizer_step) {
    // Every parameter has a gradient by now (or gets a zero one), as after
    // a step's micro-batches.
    for (torch::Tensor& p : trainable->parameters()) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    }
    torch::optim::AdamW optimizer(trainable->parameters(),
                                  torch::optim::AdamWOptions(1e-4));
    for (int i = 0; i < options.repeats; ++i) {
      DCP_ASSIGN_OR_RETURN(
          const double seconds,
          timer.MedianSeconds("the optimizer step", NoPreparation, [&] {
            optimizer.step();
            return absl::OkStatus();
          }));
      ProfileSample sample;
      sample.op = ProfileSample::Op::kOptimizerStep;
      sample.measured_seconds = seconds;
      samples.push_back(sample);
    }
  }
  return absl::OkStatus();
}

absl::Status ProfileSpMicroBatches(const ModelSpec& model, Communicator& comm,
                                   int gpus_per_node,
                                   const std::vector<int>& group_sizes,
                                   const ProfileOptions& options,
                                   const Clock& clock,
                                   std::vector<ProfileSample>& samples) {
  if (options.sp_micro_batch_shapes.empty() || group_sizes.empty()) {
    return absl::OkStatus();
  }
  const ProfileTimer timer(options.warmup, options.sp_micro_batch_repeats,
                           options.device, clock);
  DCP_ASSIGN_OR_RETURN(SyntheticTrainingModel built,
                       TrainingModel(model, options));
  const std::shared_ptr<TrainableModel> trainable = std::move(built.model);
  const std::unique_ptr<SequenceInputSource> inputs = std::move(built.inputs);
  const std::vector<int> checkpointed = CheckpointedLayerCounts(model, options);
  const absl::Duration timeout = options.collective_timeout;
  for (int group_size : group_sizes) {
    DCP_ASSIGN_OR_RETURN(const ProfileBlock block,
                         ProfileBlockOf(comm, group_size, gpus_per_node));
    CommGroup* const group = block.group;
    const bool inter_node = block.inter_node;
    // The same sample ids on every member: the same sequences.
    int64_t sample_id = 0;
    for (const auto& [sequences, length] : options.sp_micro_batch_shapes) {
      DCP_ASSIGN_OR_RETURN(
          SyntheticMicroBatch micro_batch,
          MakeMicroBatch(*inputs, sequences, length, group_size, sample_id));
      const std::vector<SequenceInput>& batch = micro_batch.sequences;
      const MicroBatchShape& shape = micro_batch.shape;
      for (int layers : checkpointed) {
        std::vector<double> communication;
        auto run = [&]() -> absl::Status {
          SequenceParallelContext sp;
          sp.group = group;
          sp.timeout = timeout;
          sp.clock = &clock;
          sp.stats = std::make_shared<CommunicationStats>();
          try {
            absl::StatusOr<ShardLoss> loss =
                trainable->ShardLossSum(batch, sp, layers);
            if (!loss.ok()) return loss.status();
            (loss->loss_sum * (1.0 / static_cast<double>(std::max<int64_t>(
                                         1, loss->loss_tokens))))
                .backward();
          } catch (...) {
            return StatusFromCurrentException("an SP micro-batch");
          }
          communication.push_back(
              absl::ToDoubleSeconds(sp.stats->all_to_all_time));
          return absl::OkStatus();
        };
        DCP_ASSIGN_OR_RETURN(
            const std::vector<double> seconds,
            timer.TimedSeconds(
                absl::StrCat("micro-batch of ", sequences, " x ", length,
                             " tokens over ", group_size, " ranks, ", layers,
                             " layers recomputed"),
                [&] { return group->Barrier(timeout); }, run));
        // The timed runs' all-to-all seconds (after the warm-up's). Means,
        // not medians: a step pays every exchange's wait, and those waits
        // (threads waking, the peer arriving) have a long tail.
        communication.erase(communication.begin(),
                            communication.begin() + timer.warmup());
        const double whole = MeanOf(seconds);
        const double inside = std::min(whole, MeanOf(communication));
        samples.push_back(
            SpMicroBatchSample(shape, inter_node, layers, whole, inside));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace dcp
