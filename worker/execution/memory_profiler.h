// Measured activation memory of a model's micro-batches, for fitting the
// memory model's per-token terms (cost_model/fitting.h).

#ifndef DCP_WORKER_EXECUTION_MEMORY_PROFILER_H_
#define DCP_WORKER_EXECUTION_MEMORY_PROFILER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "cost_model/fitting.h"
#include "cost_model/model_spec.h"
#include "torch/torch.h"

namespace dcp {

/// What ProfileActivationMemory measures. Plain value.
struct ActivationMemoryOptions {
  /// Tokens per micro-batch, each a positive multiple of sequence_tokens.
  std::vector<int64_t> tokens = {1024, 2048, 4096};
  /// Length of the packed sequences of each micro-batch.
  int64_t sequence_tokens = 512;
  /// Checkpointed (recomputed) layers, each in [0, num_layers]; every one
  /// is measured at every token count.
  std::vector<int> checkpointed_layers = {0, 1};
  /// Added to each measured peak: the model-state bytes the fit's memory
  /// model assumes (weights, gradients, optimizer shard, communicators:
  /// MemoryModel::StaticBytes() of the planner's parameters), which the
  /// profiling model does not all hold. 0 leaves the peak as measured.
  double static_bytes = 0;
  torch::Device device = torch::kCPU;
  torch::Dtype dtype = torch::kFloat32;
  /// Seeds the model's weights and the synthetic inputs.
  uint64_t seed = 0;
};

/// Runs the model of `model` (a GptModel, or a DitModel for a
/// diffusion-transformer spec, built by CreateTrainableModel) through the
/// plan executor's micro-batch path (TrainableModel::ShardLossSum over
/// synthetic inputs at SP 1, then backward) at every token count and
/// checkpointed-layer setting, and returns one kActivationMemory sample for
/// each: tokens, checkpointed_layers, and measured_bytes = the most bytes
/// allocated at once during the micro-batch above what was allocated before
/// it (weights and their gradients, which a first untimed micro-batch
/// allocates), plus options.static_bytes.
///
/// Bytes are measured by PeakAllocatedBytes: CUDA's allocator statistics on
/// a GPU; on the CPU, CpuAllocationMeter, installed for the measurement if
/// it was not (and uninstalled after). Not thread-safe with other LibTorch
/// work of the process on the CPU (the meter counts every CPU allocation).
///
/// Errors: INVALID_ARGUMENT for invalid options (the message names the
/// field) or a spec no model supports; FAILED_PRECONDITION for a device
/// whose allocations cannot be measured; INTERNAL when a micro-batch throws.
absl::StatusOr<std::vector<ProfileSample>> ProfileActivationMemory(
    const ModelSpec& model, const ActivationMemoryOptions& options);

/// The option checks of ProfileActivationMemory alone (no work).
absl::Status ValidateActivationMemoryOptions(
    const ModelSpec& model, const ActivationMemoryOptions& options);

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_MEMORY_PROFILER_H_
