#include "worker/execution/profiler.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "worker/communication/sequence_parallel.h"
#include "worker/execution/dit_model.h"
#include "worker/execution/memory_profiler.h"
#include "worker/execution/micro_batch_profiler.h"
#include "worker/execution/model.h"
#include "worker/execution/model_kind.h"
#include "worker/execution/profile_timer.h"
#include "worker/execution/sequence_attention.h"
#include "worker/libtorch_cuda.h"

namespace dcp {
namespace {

absl::Status CheckPositive(absl::string_view field,
                           const std::vector<int64_t>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ProfileOptions.", field, "[", i, "] = ", values[i],
                       " must be positive; drop it or use a positive size"));
    }
  }
  return absl::OkStatus();
}

// OK when every {sequences, tokens per sequence} shape of the ProfileOptions
// list `field` has both positive.
absl::Status CheckShapes(absl::string_view field,
                         const std::vector<std::pair<int, int64_t>>& shapes) {
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& [sequences, length] = shapes[i];
    if (sequences <= 0 || length <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ProfileOptions.", field, "[", i, "] = {", sequences, ", ", length,
          "}: sequences and tokens per sequence must be positive"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDevice(const ProfileOptions& options) {
  const torch::Device& device = options.device;
  if (device.is_cuda()) {
#if DCP_LIBTORCH_HAS_CUDA
    if (!torch::cuda::is_available()) {
      return absl::FailedPreconditionError(
          "ProfileOptions.device is CUDA but no CUDA device is visible; "
          "profile on a GPU machine or use the CPU");
    }
#else
    return absl::FailedPreconditionError(
        "ProfileOptions.device is CUDA but this LibTorch has no CUDA; build "
        "with a CUDA LibTorch (LIBTORCH_HOME) or profile on the CPU");
#endif
  } else if (!device.is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ProfileOptions.device ", device.str(),
                     " is not supported; use the CPU or a CUDA device"));
  }
  const torch::Dtype dtype = options.dtype;
  const bool supported = dtype == torch::kFloat32 || dtype == torch::kFloat64 ||
                         dtype == torch::kBFloat16 ||
                         (device.is_cuda() && dtype == torch::kHalf);
  if (!supported) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ProfileOptions.dtype ", c10::toString(dtype), " is not supported on ",
        device.str(), "; use float32, float64 or bfloat16 (float16 on CUDA)"));
  }
  return absl::OkStatus();
}

/// The activation-memory part of `options`.
ActivationMemoryOptions MemoryOptionsOf(const ModelSpec& model,
                                        const ProfileOptions& options) {
  ActivationMemoryOptions memory;
  memory.tokens = options.memory_tokens;
  memory.sequence_tokens = options.memory_sequence_tokens;
  std::vector<int> checkpointed = options.memory_checkpointed_layers.value_or(
      std::vector<int>{0, std::min(1, model.num_layers), model.num_layers});
  std::sort(checkpointed.begin(), checkpointed.end());
  checkpointed.erase(std::unique(checkpointed.begin(), checkpointed.end()),
                     checkpointed.end());
  memory.checkpointed_layers = std::move(checkpointed);
  memory.static_bytes = options.memory_static_bytes;
  memory.device = options.device;
  memory.dtype = options.dtype;
  memory.seed = options.seed;
  return memory;
}

absl::Status ValidateOptions(const ModelSpec& model,
                             const ProfileOptions& options, int gpus_per_node,
                             int world_size) {
  // The benchmarks run the model's own layer and attention code: the DiT's
  // for a diffusion-transformer spec, GptModel's otherwise.
  DCP_RETURN_IF_ERROR(IsDiffusionTransformerSpec(model)
                          ? DitModel::CheckSpec(model)
                          : GptModel::CheckSpec(model));
  if (gpus_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpus_per_node = ", gpus_per_node, " must be at least 1"));
  }
  if (options.repeats < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ProfileOptions.repeats = ", options.repeats,
                     " must be at least 1 (the median of the timed runs)"));
  }
  if (options.sp_micro_batch_repeats < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ProfileOptions.sp_micro_batch_repeats = ",
                     options.sp_micro_batch_repeats, " must be at least 1"));
  }
  if (options.warmup < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ProfileOptions.warmup = ", options.warmup, " must be at least 0"));
  }
  if (options.collective_timeout <= absl::ZeroDuration() ||
      options.collective_timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ProfileOptions.collective_timeout = ",
        absl::FormatDuration(options.collective_timeout),
        " must be positive and finite (a missing rank must not hang the "
        "profile)"));
  }
  DCP_RETURN_IF_ERROR(CheckDevice(options));
  DCP_RETURN_IF_ERROR(CheckPositive("gemm_tokens", options.gemm_tokens));
  DCP_RETURN_IF_ERROR(
      CheckPositive("attention_lengths", options.attention_lengths));
  DCP_RETURN_IF_ERROR(
      CheckPositive("all_to_all_bytes", options.all_to_all_bytes));
  DCP_RETURN_IF_ERROR(
      CheckPositive("all_reduce_bytes", options.all_reduce_bytes));
  DCP_RETURN_IF_ERROR(CheckPositive("memory_tokens", options.memory_tokens));
  DCP_RETURN_IF_ERROR(
      CheckShapes("micro_batch_shapes", options.micro_batch_shapes));
  DCP_RETURN_IF_ERROR(
      CheckShapes("sp_micro_batch_shapes", options.sp_micro_batch_shapes));
  for (int layers :
       options.micro_batch_checkpointed_layers.value_or(std::vector<int>{})) {
    if (layers < 0 || layers > model.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ProfileOptions.micro_batch_checkpointed_layers has ", layers,
          ", outside [0, num_layers = ", model.num_layers, "]"));
    }
  }

  const int64_t element_bytes = torch::elementSize(options.dtype);
  absl::StatusOr<std::vector<int>> group_sizes =
      ProfileGroupSizes(options, world_size);
  if (!group_sizes.ok()) return group_sizes.status();
  if (!group_sizes->empty()) {
    const int64_t largest = group_sizes->back();
    for (int64_t bytes : options.all_to_all_bytes) {
      if (bytes < largest * element_bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("ProfileOptions.all_to_all_bytes ", bytes,
                         " is less than one ", c10::toString(options.dtype),
                         " element per member of a group of ", largest, " (",
                         largest * element_bytes, " bytes); use larger sizes"));
      }
    }
  }
  DCP_RETURN_IF_ERROR(
      CheckPositive("zero1_collective_bytes", options.zero1_collective_bytes));
  for (int64_t bytes : options.zero1_collective_bytes) {
    // The reduce-scatter runs in float32, the all-gather in options.dtype.
    const int64_t widest = std::max<int64_t>(element_bytes, 4);
    if (bytes < world_size * widest) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ProfileOptions.zero1_collective_bytes ", bytes,
          " is less than one float32 element per rank of the world of ",
          world_size, " (", world_size * widest, " bytes); use larger sizes"));
    }
  }
  for (int64_t bytes : options.all_reduce_bytes) {
    if (bytes < element_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ProfileOptions.all_reduce_bytes ", bytes, " is less than one ",
          c10::toString(options.dtype), " element (", element_bytes,
          " bytes); use larger sizes"));
    }
  }
  DCP_RETURN_IF_ERROR(
      ValidateActivationMemoryOptions(model, MemoryOptionsOf(model, options)));
  return absl::OkStatus();
}

/// Random inputs of the compute benchmarks, drawn on the CPU from one seeded
/// generator (identical on every device), then moved.
class InputSource {
 public:
  explicit InputSource(const ProfileOptions& options)
      : generator_(at::detail::createCPUGenerator(options.seed)),
        options_(torch::TensorOptions()
                     .dtype(options.dtype)
                     .device(options.device)) {}

  torch::Tensor Normal(at::IntArrayRef sizes, double scale = 1.0) {
    return (torch::randn(sizes, generator_, torch::kFloat32) * scale)
        .to(options_);
  }

 private:
  at::Generator generator_;
  torch::TensorOptions options_;
};

// The forward GEMMs of `layer` (a DecoderLayer or a DitBlock: both have
// ProjectQkv, ProjectOutput and Mlp).
template <typename Layer>
absl::Status ProfileLayerGemms(Layer& layer, const ModelSpec& model,
                               const ProfileOptions& options,
                               const ProfileTimer& timer, InputSource& inputs,
                               std::vector<ProfileSample>& samples);

absl::Status ProfileGemms(const ModelSpec& model, const ProfileOptions& options,
                          const ProfileTimer& timer, InputSource& inputs,
                          std::vector<ProfileSample>& samples) {
  // The model's own layer, moved to the profiled device and dtype.
  at::Generator generator = at::detail::createCPUGenerator(options.seed);
  if (IsDiffusionTransformerSpec(model)) {
    DitBlock block(model, DitModelOptions(), generator);
    block.to(options.device, options.dtype);
    return ProfileLayerGemms(block, model, options, timer, inputs, samples);
  }
  DecoderLayer layer(model, GptModelOptions(), generator);
  layer.to(options.device, options.dtype);
  return ProfileLayerGemms(layer, model, options, timer, inputs, samples);
}

template <typename Layer>
absl::Status ProfileLayerGemms(Layer& layer, const ModelSpec& model,
                               const ProfileOptions& options,
                               const ProfileTimer& timer, InputSource& inputs,
                               std::vector<ProfileSample>& samples) {
  // The forward GEMMs alone, as the samples' flops count them.
  torch::NoGradGuard no_grad;
  const double flops_per_token = model.LinearForwardFlopsPerToken();
  for (int64_t tokens : options.gemm_tokens) {
    const torch::Tensor x = inputs.Normal({tokens, model.hidden_size});
    auto layer_gemms = [&]() -> absl::Status {
      auto qkv = layer.ProjectQkv(x);
      torch::Tensor output = layer.ProjectOutput(x);
      torch::Tensor mlp = layer.Mlp(x);
      return absl::OkStatus();
    };
    absl::StatusOr<double> seconds =
        timer.MedianSeconds(absl::StrCat("GEMMs of ", tokens, " tokens"),
                            NoPreparation, layer_gemms);
    if (!seconds.ok()) return seconds.status();
    ProfileSample sample;
    sample.op = ProfileSample::Op::kGemm;
    sample.tokens = static_cast<double>(tokens);
    sample.flops = flops_per_token * static_cast<double>(tokens);
    sample.measured_seconds = *seconds;
    samples.push_back(sample);
  }
  return absl::OkStatus();
}

absl::Status ProfileAttention(const ModelSpec& model,
                              const ProfileOptions& options,
                              const ProfileTimer& timer, InputSource& inputs,
                              std::vector<ProfileSample>& samples) {
  const int64_t q_heads = model.num_attention_heads;
  const int64_t kv_heads = model.num_kv_heads;
  const int64_t head_dim = model.HeadDim();
  const double per_squared_token = model.AttentionForwardFlopsPerSquaredToken();
  for (int64_t length : options.attention_lengths) {
    const torch::Tensor q =
        inputs.Normal({q_heads, length, head_dim}).requires_grad_(true);
    const torch::Tensor k =
        inputs.Normal({kv_heads, length, head_dim}).requires_grad_(true);
    const torch::Tensor v =
        inputs.Normal({kv_heads, length, head_dim}).requires_grad_(true);
    const torch::Tensor output_gradient =
        inputs.Normal({q_heads, length, head_dim});
    // The model's own attention core for one sequence of local heads
    // (bidirectional for a DiT: model.causal is false).
    auto forward = [&]() -> absl::Status {
      torch::Tensor output =
          SequenceAttention(q, k, v, /*real_tokens=*/length, model.causal);
      return absl::OkStatus();
    };
    absl::StatusOr<double> forward_seconds = timer.MedianSeconds(
        absl::StrCat("attention forward of ", length, " tokens"), NoPreparation,
        forward);
    if (!forward_seconds.ok()) return forward_seconds.status();

    torch::Tensor output;
    auto prepare_backward = [&]() -> absl::Status {
      for (const torch::Tensor& input : {q, k, v}) {
        input.mutable_grad() = torch::Tensor();
      }
      output = SequenceAttention(q, k, v, /*real_tokens=*/length, model.causal);
      return absl::OkStatus();
    };
    auto backward = [&]() -> absl::Status {
      torch::autograd::backward({output}, {output_gradient});
      output = torch::Tensor();
      return absl::OkStatus();
    };
    absl::StatusOr<double> backward_seconds = timer.MedianSeconds(
        absl::StrCat("attention backward of ", length, " tokens"),
        prepare_backward, backward);
    if (!backward_seconds.ok()) return backward_seconds.status();

    const double squared = static_cast<double>(length) * length;
    ProfileSample sample;
    sample.flops = per_squared_token * squared;
    sample.sum_squared_lengths = squared;
    sample.sum_lengths = static_cast<double>(length);
    sample.op = ProfileSample::Op::kAttentionForward;
    sample.measured_seconds = *forward_seconds;
    samples.push_back(sample);
    sample.op = ProfileSample::Op::kAttentionBackward;
    sample.measured_seconds = *backward_seconds;
    samples.push_back(sample);
  }
  return absl::OkStatus();
}

absl::Status ProfileCompute(const ModelSpec& model,
                            const ProfileOptions& options, const Clock& clock,
                            std::vector<ProfileSample>& samples) {
  const ProfileTimer timer(options.warmup, options.repeats, options.device,
                           clock);
  InputSource inputs(options);
  try {
    DCP_RETURN_IF_ERROR(ProfileGemms(model, options, timer, inputs, samples));
    DCP_RETURN_IF_ERROR(
        ProfileAttention(model, options, timer, inputs, samples));
    DCP_ASSIGN_OR_RETURN(
        const std::vector<ProfileSample> memory,
        ProfileActivationMemory(model, MemoryOptionsOf(model, options)));
    samples.insert(samples.end(), memory.begin(), memory.end());
    DCP_RETURN_IF_ERROR(ProfileMicroBatches(model, options, timer, samples));
  } catch (...) {
    return StatusFromCurrentException("profiling compute");
  }
  return absl::OkStatus();
}

// Times `run`, the collective `op` (called `name`) of `bytes` over `group`,
// a barrier before each run, and appends its sample: the bytes of `priced`
// over the group's ranks, across nodes when `inter_node`.
absl::Status TimeCollective(const ProfileTimer& timer, CommGroup& group,
                            absl::Duration timeout, bool inter_node,
                            ProfileSample::Op op, const char* name,
                            int64_t bytes, const torch::Tensor& priced,
                            const std::function<absl::Status()>& run,
                            std::vector<ProfileSample>& samples) {
  DCP_ASSIGN_OR_RETURN(const double seconds,
                       timer.MedianSeconds(
                           absl::StrCat(name, " of ", bytes, " bytes over ",
                                        group.size(), " ranks"),
                           [&] { return group.Barrier(timeout); }, run));
  ProfileSample sample;
  sample.op = op;
  sample.group_size = group.size();
  sample.inter_node = inter_node;
  sample.bytes = static_cast<double>(priced.nbytes());
  sample.measured_seconds = seconds;
  samples.push_back(sample);
  return absl::OkStatus();
}

absl::Status ProfileCollectives(const ModelSpec& model, Communicator& comm,
                                int gpus_per_node,
                                const std::vector<int>& group_sizes,
                                const ProfileOptions& options,
                                const Clock& clock,
                                std::vector<ProfileSample>& samples) {
  const ProfileTimer timer(options.warmup, options.repeats, options.device,
                           clock);
  const absl::Duration timeout = options.collective_timeout;
  const int world_size = comm.world_size();
  const int64_t element_bytes = torch::elementSize(options.dtype);
  const torch::TensorOptions tensor_options =
      torch::TensorOptions().dtype(options.dtype).device(options.device);
  CommGroup& world = comm.World();
  DCP_RETURN_IF_ERROR(world.Barrier(timeout));

  for (int group_size : group_sizes) {
    DCP_ASSIGN_OR_RETURN(const ProfileBlock block,
                         ProfileBlockOf(comm, group_size, gpus_per_node));
    CommGroup* const group = block.group;
    for (int64_t bytes : options.all_to_all_bytes) {
      const int64_t chunk_elements = bytes / (element_bytes * group_size);
      torch::Tensor input =
          torch::zeros({group_size, chunk_elements}, tensor_options);
      torch::Tensor output = torch::empty_like(input);
      DCP_RETURN_IF_ERROR(TimeCollective(
          timer, *group, timeout, block.inter_node,
          ProfileSample::Op::kAllToAll, "all-to-all", bytes, input,
          [&] { return group->AllToAll(input, output, timeout); }, samples));
    }
  }

  DCP_RETURN_IF_ERROR(ProfileSpMicroBatches(
      model, comm, gpus_per_node, group_sizes, options, clock, samples));

  if (world_size >= 2) {
    const bool inter_node = world_size > gpus_per_node;
    for (int64_t bytes : options.all_reduce_bytes) {
      torch::Tensor buffer =
          torch::zeros({bytes / element_bytes}, tensor_options);
      DCP_RETURN_IF_ERROR(TimeCollective(
          timer, world, timeout, inter_node, ProfileSample::Op::kAllReduce,
          "all-reduce", bytes, buffer,
          [&] { return world.AllReduceSum(buffer, timeout); }, samples));
    }
    // ZeRO-1's pair, as the plan executor runs them: the float32 gradients
    // reduce-scattered, the weights all-gathered in the model's dtype.
    for (int64_t bytes : options.zero1_collective_bytes) {
      const int64_t shard_gradients = bytes / (4 * world_size);
      torch::Tensor gradients =
          torch::zeros({world_size * shard_gradients},
                       tensor_options.dtype(torch::kFloat32));
      torch::Tensor summed =
          torch::empty({shard_gradients}, gradients.options());
      DCP_RETURN_IF_ERROR(TimeCollective(
          timer, world, timeout, inter_node, ProfileSample::Op::kReduceScatter,
          "reduce-scatter", bytes, gradients,
          [&] { return world.ReduceScatterSum(gradients, summed, timeout); },
          samples));

      const int64_t shard_weights = bytes / (element_bytes * world_size);
      torch::Tensor shard = torch::zeros({shard_weights}, tensor_options);
      torch::Tensor weights =
          torch::empty({world_size * shard_weights}, tensor_options);
      DCP_RETURN_IF_ERROR(TimeCollective(
          timer, world, timeout, inter_node, ProfileSample::Op::kAllGather,
          "all-gather", bytes, weights,
          [&] { return world.AllGather(shard, weights, timeout); }, samples));
    }
  }
  return world.Barrier(timeout);
}

}  // namespace

std::vector<std::pair<int, int64_t>> DefaultMicroBatchProfileShapes() {
  return {{1, 32},  {1, 256}, {1, 1024}, {4, 64},  {4, 256},
          {16, 32}, {16, 96}, {48, 40},  {2, 512}, {8, 128}};
}

std::vector<std::pair<int, int64_t>> DefaultSpMicroBatchProfileShapes() {
  return {{1, 32}, {1, 160}, {4, 64}, {2, 768}};
}

absl::StatusOr<ProfileBlock> ProfileBlockOf(Communicator& comm, int group_size,
                                            int gpus_per_node) {
  const int first = comm.rank() / group_size * group_size;
  std::vector<int> members;
  for (int r = first; r < first + group_size; ++r) members.push_back(r);
  absl::StatusOr<CommGroup*> group = comm.Group(members);
  if (!group.ok()) return group.status();
  return ProfileBlock{*group, first / gpus_per_node !=
                                  (first + group_size - 1) / gpus_per_node};
}

absl::StatusOr<std::vector<int>> ProfileGroupSizes(
    const ProfileOptions& options, int world_size) {
  std::vector<int> sizes;
  if (!options.group_sizes.has_value()) {
    for (int size = 2; size <= world_size; size *= 2) {
      if (world_size % size == 0) sizes.push_back(size);
    }
    return sizes;
  }
  sizes = *options.group_sizes;
  for (int size : sizes) {
    if (size < 2 || size > world_size || world_size % size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ProfileOptions.group_sizes has ", size,
          ", but an all-to-all group size must be at least 2 and divide the "
          "world size ",
          world_size, "; use sizes among the divisors of ", world_size));
    }
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

absl::StatusOr<std::vector<ProfileSample>> RunProfile(
    const ModelSpec& model, Communicator& comm, int gpus_per_node,
    const ProfileOptions& options, const Clock& clock) {
  DCP_RETURN_IF_ERROR(
      ValidateOptions(model, options, gpus_per_node, comm.world_size()));
  absl::StatusOr<std::vector<int>> group_sizes =
      ProfileGroupSizes(options, comm.world_size());
  if (!group_sizes.ok()) return group_sizes.status();

  std::vector<ProfileSample> samples;
  DCP_RETURN_IF_ERROR(ProfileCompute(model, options, clock, samples));
  DCP_RETURN_IF_ERROR(ProfileCollectives(
      model, comm, gpus_per_node, *group_sizes, options, clock, samples));
  return samples;
}

}  // namespace dcp
