#include "worker/execution/memory_profiler.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/communication/sequence_parallel.h"
#include "worker/execution/cpu_allocation_meter.h"
#include "worker/execution/model_kind.h"
#include "worker/execution/peak_allocated_bytes.h"

namespace dcp {
namespace {

/// Installs the CPU allocation meter for its lifetime when measuring on the
/// CPU and it is not installed yet.
class ScopedCpuMeter {
 public:
  explicit ScopedCpuMeter(const torch::Device& device) {
    CpuAllocationMeter& meter = CpuAllocationMeter::Get();
    if (device.is_cpu() && !meter.installed()) {
      meter.Install();
      installed_here_ = true;
    }
  }
  ~ScopedCpuMeter() {
    if (installed_here_) CpuAllocationMeter::Get().Uninstall();
  }
  ScopedCpuMeter(const ScopedCpuMeter&) = delete;
  ScopedCpuMeter& operator=(const ScopedCpuMeter&) = delete;

 private:
  bool installed_here_ = false;
};

/// One micro-batch forward and backward, as the plan executor runs it.
absl::Status RunMicroBatch(TrainableModel& model,
                           const std::vector<SequenceInput>& sequences,
                           int checkpointed_layers) {
  absl::StatusOr<ShardLoss> loss = model.ShardLossSum(
      sequences, SequenceParallelContext(), checkpointed_layers);
  if (!loss.ok()) return loss.status();
  try {
    (loss->loss_sum * (1.0 / static_cast<double>(loss->loss_tokens)))
        .backward();
  } catch (...) {
    return StatusFromCurrentException("backward of a profiled micro-batch");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateActivationMemoryOptions(
    const ModelSpec& model, const ActivationMemoryOptions& options) {
  if (options.sequence_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory sequence_tokens = ", options.sequence_tokens,
                     " must be positive"));
  }
  for (int64_t tokens : options.tokens) {
    if (tokens <= 0 || tokens % options.sequence_tokens != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "memory tokens ", tokens,
          " is not a positive multiple of memory_sequence_tokens (",
          options.sequence_tokens, "); round it"));
    }
  }
  for (int layers : options.checkpointed_layers) {
    if (layers < 0 || layers > model.num_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory_checkpointed_layers ", layers,
                       " is outside [0, num_layers = ", model.num_layers,
                       "] of model '", model.name, "'"));
    }
  }
  if (!(options.static_bytes >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory_static_bytes = ", options.static_bytes,
                     " must be a non-negative number"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ProfileSample>> ProfileActivationMemory(
    const ModelSpec& model, const ActivationMemoryOptions& options) {
  DCP_RETURN_IF_ERROR(ValidateActivationMemoryOptions(model, options));
  std::vector<ProfileSample> samples;
  if (options.tokens.empty() || options.checkpointed_layers.empty()) {
    return samples;
  }
  const ScopedCpuMeter meter(options.device);
  if (!PeakAllocatedBytes(options.device).measured()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the allocations of ", options.device.str(),
        " cannot be measured; profile activation memory on the CPU or a CUDA "
        "device (in a CUDA build)"));
  }
  GptModelOptions model_options;
  model_options.seed = options.seed;
  model_options.dtype = options.dtype;
  model_options.device = options.device;
  DCP_ASSIGN_OR_RETURN(SyntheticTrainingModel built,
                       CreateSyntheticTrainingModel(model, model_options));
  const std::shared_ptr<TrainableModel> trainable = std::move(built.model);
  const std::unique_ptr<SequenceInputSource> inputs = std::move(built.inputs);
  try {
    int64_t sample_id = 0;
    for (int layers : options.checkpointed_layers) {
      for (int64_t tokens : options.tokens) {
        std::vector<SequenceInput> sequences;
        for (int64_t i = 0; i < tokens / options.sequence_tokens; ++i) {
          DCP_ASSIGN_OR_RETURN(
              SequenceInput input,
              inputs->Input(sample_id++, options.sequence_tokens));
          sequences.push_back(std::move(input));
        }
        // An unmeasured first run allocates the gradients, which later runs
        // accumulate into in place (they are model state, not activations).
        DCP_RETURN_IF_ERROR(RunMicroBatch(*trainable, sequences, layers));
        const PeakAllocatedBytes peak(options.device);
        DCP_RETURN_IF_ERROR(RunMicroBatch(*trainable, sequences, layers));
        ProfileSample sample;
        sample.op = ProfileSample::Op::kActivationMemory;
        sample.tokens = static_cast<double>(tokens);
        sample.checkpointed_layers = layers;
        sample.measured_bytes =
            options.static_bytes +
            static_cast<double>(peak.Peak() - peak.start_bytes());
        samples.push_back(sample);
      }
    }
  } catch (...) {
    return StatusFromCurrentException("profiling activation memory");
  }
  return samples;
}

}  // namespace dcp
