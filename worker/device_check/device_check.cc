#include "worker/device_check/device_check.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/percentile.h"
#include "common/status_macros.h"
#include "cost_model/cost_model.h"
#include "planner/plan/plan.h"
#include "worker/communication/sequence_parallel.h"
#include "worker/execution/cpu_allocation_meter.h"
#include "worker/execution/device_sync.h"
#include "worker/execution/dit_model.h"
#include "worker/execution/model_kind.h"
#include "worker/execution/plan_executor.h"

namespace dcp {
namespace {

torch::Dtype DtypeOf(TrainingPrecision precision) {
  return precision == TrainingPrecision::kBf16 ? torch::kBFloat16
                                               : torch::kFloat32;
}

// An error that is the device running out of memory (then the item is
// skipped, not the check failed).
bool IsOutOfMemory(const absl::Status& status) {
  return absl::StrContains(status.message(), "out of memory") ||
         absl::StrContains(status.message(), "OutOfMemory");
}

// The cost parameters the check predicts with before fitting: the public
// defaults, with the training state of `precision` (no ZeRO-1: one rank
// holds everything anyway) and no communicator bytes (NCCL's memory is
// outside the allocator whose peak is measured).
CostParams CheckDefaults(const ModelSpec& spec, const ClusterSpec& cluster,
                         TrainingPrecision precision) {
  CostParams params = DefaultCostParams(spec, cluster);
  SetTrainingStateBytes(precision, /*zero1=*/false, params.memory);
  params.memory.communicator_bytes = 0;
  params.memory.communicators_per_rank = 0;
  return params;
}

// ProfileOptions that measure nothing but what the caller adds back.
ProfileOptions NothingOf(const ProfileOptions& base) {
  ProfileOptions options = base;
  options.gemm_tokens.clear();
  options.attention_lengths.clear();
  options.memory_tokens.clear();
  options.group_sizes = std::vector<int>();
  options.all_to_all_bytes.clear();
  options.all_reduce_bytes.clear();
  return options;
}

absl::Status CheckAscendingPositive(const std::string& field,
                                    const std::vector<int64_t>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] <= 0 || (i > 0 && values[i] <= values[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " must be positive and ascending; item ", i, " is ", values[i],
          (i > 0 ? absl::StrCat(" after ", values[i - 1]) : "")));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckBudget(const char* field, absl::Duration budget) {
  if (budget <= absl::ZeroDuration() || budget == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", absl::FormatDuration(budget),
                     " must be positive and finite"));
  }
  return absl::OkStatus();
}

// Runs the phases; one per check, not thread-safe.
class DeviceCheck {
 public:
  DeviceCheck(const DeviceCheckOptions& options, Communicator& communicator,
              const Clock& clock)
      : options_(options),
        communicator_(communicator),
        clock_(clock),
        dtype_(DtypeOf(options.precision)) {}

  absl::StatusOr<DeviceCheckReport> Run() {
    for (const ModelCase& model_case : options_.models) {
      const ModelSpec spec = SpecAsRun(model_case.spec);
      const CostParams defaults =
          CheckDefaults(spec, options_.cluster, options_.precision);
      options_.log(absl::StrCat("profiling ", spec.name, " (", spec.num_layers,
                                " layers)"));
      DCP_ASSIGN_OR_RETURN(std::vector<ProfileSample> samples,
                           Profile(spec, defaults));
      absl::StatusOr<CostModelFit> fit =
          FitCostModel(spec, options_.cluster, defaults, samples);
      if (!fit.ok()) {
        return absl::Status(
            fit.status().code(),
            absl::StrCat("fitting ", spec.name, ": ", fit.status().message()));
      }
      report_.fits.emplace_back(spec.name, fit->reports);
      report_.samples.emplace_back(spec.name, std::move(samples));
      absl::StatusOr<CostModel> cost =
          CostModel::Create(spec, options_.cluster, fit->params);
      if (!cost.ok()) return cost.status();
      options_.log(absl::StrCat("running micro-batches of ", spec.name));
      DCP_RETURN_IF_ERROR(RunMicroBatches(model_case, spec, *cost));
    }
    if (options_.collective_bytes.empty()) {
      options_.log(
          "no collectives at world size 1: one rank needs no backend");
    } else {
      options_.log("timing collectives at world size 1");
      DCP_RETURN_IF_ERROR(TimeCollectives());
    }
    return std::move(report_);
  }

 private:
  // The spec with the dtype the check runs in, so that the memory model
  // counts its bytes.
  ModelSpec SpecAsRun(ModelSpec spec) const {
    spec.dtype_bytes = static_cast<int>(torch::elementSize(dtype_));
    return spec;
  }

  void Skip(const std::string& what) {
    options_.log(absl::StrCat("skipped: ", what));
    report_.skipped.push_back(what);
  }

  // RunProfile of one measurement; appends its samples.
  absl::Status ProfileItem(const ModelSpec& spec, const ProfileOptions& options,
                           std::vector<ProfileSample>& samples) {
    absl::StatusOr<std::vector<ProfileSample>> measured =
        RunProfile(spec, communicator_, /*gpus_per_node=*/1, options, clock_);
    if (!measured.ok()) return measured.status();
    samples.insert(samples.end(), measured->begin(), measured->end());
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<ProfileSample>> Profile(
      const ModelSpec& spec, const CostParams& defaults) {
    const absl::Time deadline = clock_.Now() + options_.profile_budget;
    ProfileOptions base = options_.profile;
    base.device = options_.device;
    base.dtype = dtype_;
    base.seed = options_.seed;
    base.memory_static_bytes =
        MemoryModel(spec, defaults.memory, /*world_size=*/1).StaticBytes();
    std::vector<ProfileSample> samples;

    ProfileOptions gemm = NothingOf(base);
    gemm.gemm_tokens = base.gemm_tokens;
    if (absl::Status status = ProfileItem(spec, gemm, samples); !status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("profiling the GEMMs of ", spec.name,
                                       ": ", status.message()));
    }

    // Attention, shortest first; a length whose estimate (the last one's
    // time times the squared length ratio) overruns the budget is skipped.
    double last_seconds = 0;
    int64_t last_length = 0;
    for (int64_t length : base.attention_lengths) {
      const absl::Time now = clock_.Now();
      const double ratio =
          last_length > 0
              ? static_cast<double>(length) / static_cast<double>(last_length)
              : 0;
      const absl::Duration estimate =
          absl::Seconds(last_seconds * ratio * ratio);
      if (now + estimate > deadline) {
        Skip(absl::StrCat(spec.name, " attention at ", length,
                          " tokens: estimated ", absl::FormatDuration(estimate),
                          " is past the profile budget"));
        continue;
      }
      ProfileOptions attention = NothingOf(base);
      attention.attention_lengths = {length};
      if (absl::Status status = ProfileItem(spec, attention, samples);
          !status.ok()) {
        if (!IsOutOfMemory(status)) {
          return absl::Status(
              status.code(),
              absl::StrCat("profiling attention of ", spec.name, " at ", length,
                           " tokens: ", status.message()));
        }
        Skip(absl::StrCat(spec.name, " attention at ", length,
                          " tokens: out of device memory"));
        continue;
      }
      last_seconds = absl::ToDoubleSeconds(clock_.Now() - now);
      last_length = length;
    }

    // Activation memory: RunProfile measures it on CUDA for GptModel only.
    if (!base.memory_tokens.empty()) {
      if (clock_.Now() > deadline) {
        Skip(absl::StrCat(spec.name,
                          " activation memory: past the profile budget"));
      } else {
        ProfileOptions memory = NothingOf(base);
        memory.memory_tokens = base.memory_tokens;
        if (absl::Status status = ProfileItem(spec, memory, samples);
            !status.ok()) {
          if (!IsOutOfMemory(status)) {
            return absl::Status(
                status.code(), absl::StrCat("profiling the memory of ",
                                            spec.name, ": ", status.message()));
          }
          Skip(absl::StrCat(spec.name,
                            " activation memory: out of device memory"));
        }
      }
    }
    return samples;
  }

  absl::Status RunMicroBatches(const ModelCase& model_case,
                               const ModelSpec& spec, const CostModel& cost) {
    const absl::Time deadline = clock_.Now() + options_.micro_batch_budget;
    GptModelOptions model_options;
    model_options.seed = options_.seed;
    model_options.dtype = dtype_;
    model_options.device = options_.device;
    absl::StatusOr<SyntheticTrainingModel> built =
        CreateSyntheticTrainingModel(spec, model_options);
    if (!built.ok()) return built.status();
    const std::shared_ptr<TrainableModel>* const model = &built->model;
    const std::unique_ptr<SequenceInputSource>* const source = &built->inputs;
    PlanExecutorOptions executor_options;
    executor_options.clock = &clock_;
    PlanExecutor executor(*model, communicator_, executor_options);

    bool warmed_up = false;
    for (int64_t tokens : model_case.micro_batch_tokens) {
      absl::StatusOr<SequenceInput> input = (*source)->Input(0, tokens);
      if (!input.ok()) return input.status();
      const int64_t loss_tokens = (*model)->LossTokensOfSequence(tokens);
      const std::function<SequenceInput(int)> inputs_of = [&input](int) {
        return *input;
      };
      for (int checkpointed : model_case.checkpointed_layers) {
        const std::string item =
            absl::StrCat(spec.name, " micro-batch of ", tokens, " tokens with ",
                         checkpointed, " recomputed layers");
        if (clock_.Now() > deadline) {
          Skip(absl::StrCat(item, ": past the micro-batch budget"));
          continue;
        }
        Plan plan;
        plan.strategy = "device-check";
        GroupPlan group;
        group.ranks = {communicator_.rank()};
        MicroBatchPlan micro_batch;
        micro_batch.sequence_indices = {0};
        micro_batch.checkpointed_layers = checkpointed;
        group.micro_batches = {micro_batch};
        plan.groups = {group};
        const std::vector<int64_t> lengths = {tokens};
        PredictPlan(cost, lengths, plan);

        std::vector<double> seconds;
        std::optional<double> peak;
        bool out_of_memory = false;
        const int runs = options_.micro_batch_repeats + (warmed_up ? 0 : 1);
        for (int run = 0; run < runs; ++run) {
          absl::StatusOr<StepResult> step =
              executor.RunStep(plan, inputs_of, loss_tokens);
          if (!step.ok()) {
            if (!IsOutOfMemory(step.status())) {
              return absl::Status(
                  step.status().code(),
                  absl::StrCat(item, ": ", step.status().message()));
            }
            out_of_memory = true;
            break;
          }
          if (!warmed_up) {  // The first step creates AdamW's state.
            warmed_up = true;
            continue;
          }
          const MicroBatchResult& result = step->micro_batches.front();
          seconds.push_back(result.compute_seconds +
                            result.communication_seconds);
          if (result.peak_allocated_bytes >= 0) {
            peak = std::max(peak.value_or(0),
                            static_cast<double>(result.peak_allocated_bytes));
          }
        }
        if (out_of_memory) {
          Skip(absl::StrCat(item, ": out of device memory"));
          continue;
        }
        CheckRow row;
        row.model = spec.name;
        row.num_layers = spec.num_layers;
        row.tokens = tokens;
        row.checkpointed_layers = checkpointed;
        const MicroBatchPlan& predicted = plan.groups[0].micro_batches[0];
        row.predicted_seconds = predicted.predicted_seconds;
        row.predicted_peak_bytes = predicted.predicted_peak_bytes;
        row.measured_seconds = Percentile(seconds, 0.5);
        row.measured_peak_bytes = peak;
        options_.log(absl::StrFormat("%s: predicted %.4g s, measured %.4g s",
                                     item, row.predicted_seconds,
                                     row.measured_seconds));
        report_.rows.push_back(row);
        if (options_.on_row) options_.on_row(report_.rows);
      }
    }
    return absl::OkStatus();
  }

  // Times `run` (a collective on the world) as the median of the repeats.
  absl::StatusOr<double> TimeCollective(
      const std::function<absl::Status()>& run) {
    std::vector<double> seconds;
    const int runs = options_.profile.warmup + options_.profile.repeats;
    for (int i = 0; i < runs; ++i) {
      SynchronizeDevice(options_.device);
      const absl::Time start = clock_.Now();
      DCP_RETURN_IF_ERROR(run());
      SynchronizeDevice(options_.device);
      const absl::Time end = clock_.Now();
      if (i >= options_.profile.warmup) {
        seconds.push_back(absl::ToDoubleSeconds(end - start));
      }
    }
    return Percentile(seconds, 0.5);
  }

  absl::Status TimeCollectives() {
    const absl::Time deadline = clock_.Now() + options_.collectives_budget;
    CommGroup& world = communicator_.World();
    const absl::Duration timeout = options_.profile.collective_timeout;
    const int64_t element_bytes = torch::elementSize(dtype_);
    const int members = world.size();
    for (int64_t bytes : options_.collective_bytes) {
      if (clock_.Now() > deadline) {
        Skip(absl::StrCat("collectives of ", bytes,
                          " bytes: past the collectives budget"));
        continue;
      }
      const int64_t elements =
          std::max<int64_t>(members, bytes / element_bytes / members * members);
      const torch::TensorOptions tensor_options =
          torch::TensorOptions().dtype(dtype_).device(options_.device);
      torch::Tensor buffer = torch::ones({elements}, tensor_options);
      torch::Tensor chunk = torch::empty({elements / members}, tensor_options);
      torch::Tensor gathered =
          torch::empty({elements * members}, tensor_options);
      torch::Tensor exchanged = torch::empty({elements}, tensor_options);
      const std::vector<std::pair<std::string, std::function<absl::Status()>>>
          ops = {
              {"all_reduce",
               [&] { return world.AllReduceSum(buffer, timeout); }},
              {"reduce_scatter",
               [&] { return world.ReduceScatterSum(buffer, chunk, timeout); }},
              {"all_gather",
               [&] { return world.AllGather(chunk, gathered, timeout); }},
              {"all_to_all",
               [&] { return world.AllToAll(buffer, exchanged, timeout); }},
          };
      for (const auto& [name, run] : ops) {
        absl::StatusOr<double> seconds;
        try {
          seconds = TimeCollective(run);
        } catch (...) {
          seconds = StatusFromCurrentException(name.c_str());
        }
        if (!seconds.ok()) {
          return absl::Status(seconds.status().code(),
                              absl::StrCat("timing ", name, " of ", bytes,
                                           " bytes at world size ", members,
                                           ": ", seconds.status().message()));
        }
        report_.collectives.push_back(
            {name, elements * element_bytes, *seconds});
      }
    }
    return absl::OkStatus();
  }

  DeviceCheckOptions options_;
  Communicator& communicator_;
  const Clock& clock_;
  const torch::Dtype dtype_;
  DeviceCheckReport report_;
};

}  // namespace

absl::Status ValidateDeviceCheckOptions(const DeviceCheckOptions& options) {
  if (!options.log) {
    return absl::InvalidArgumentError("DeviceCheckOptions.log is required");
  }
  if (options.models.empty()) {
    return absl::InvalidArgumentError(
        "DeviceCheckOptions.models is empty; name at least one model");
  }
  for (const ModelCase& model_case : options.models) {
    const ModelSpec& spec = model_case.spec;
    DCP_RETURN_IF_ERROR(IsDiffusionTransformerSpec(spec)
                            ? DitModel::CheckSpec(spec)
                            : GptModel::CheckSpec(spec));
    DCP_RETURN_IF_ERROR(
        CheckAscendingPositive(absl::StrCat(spec.name, " micro-batch tokens"),
                               model_case.micro_batch_tokens));
    if (model_case.micro_batch_tokens.empty() ||
        model_case.checkpointed_layers.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.name,
                       ": give at least one micro-batch length and one "
                       "recompute setting"));
    }
    for (int layers : model_case.checkpointed_layers) {
      if (layers < 0 || layers > spec.num_layers) {
        return absl::InvalidArgumentError(
            absl::StrCat(spec.name, ": recomputed layers ", layers,
                         " is outside [0, ", spec.num_layers, "]"));
      }
    }
  }
  DCP_RETURN_IF_ERROR(CheckAscendingPositive(
      "profile.attention_lengths", options.profile.attention_lengths));
  DCP_RETURN_IF_ERROR(
      CheckAscendingPositive("collective_bytes", options.collective_bytes));
  if (options.micro_batch_repeats < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("micro_batch_repeats = ", options.micro_batch_repeats,
                     " must be at least 1"));
  }
  DCP_RETURN_IF_ERROR(CheckBudget("profile_budget", options.profile_budget));
  DCP_RETURN_IF_ERROR(
      CheckBudget("collectives_budget", options.collectives_budget));
  DCP_RETURN_IF_ERROR(
      CheckBudget("micro_batch_budget", options.micro_batch_budget));
  return ValidateClusterSpec(options.cluster);
}

absl::StatusOr<DeviceCheckReport> RunDeviceCheck(
    const DeviceCheckOptions& options, Communicator& communicator,
    const Clock& clock) {
  DCP_RETURN_IF_ERROR(ValidateDeviceCheckOptions(options));
  // On the CPU the meter stands in for CUDA's allocator statistics.
  const bool meter_cpu =
      options.device.is_cpu() && !CpuAllocationMeter::Get().installed();
  if (meter_cpu) CpuAllocationMeter::Get().Install();
  DeviceCheck check(options, communicator, clock);
  absl::StatusOr<DeviceCheckReport> report = check.Run();
  if (meter_cpu) CpuAllocationMeter::Get().Uninstall();
  return report;
}

std::string FormatDeviceCheckReport(const DeviceCheckReport& report) {
  std::string out;
  for (const auto& [model, reports] : report.fits) {
    absl::StrAppend(&out, "fit of ", model, ":\n");
    for (const ModelFitReport& fit : reports) {
      absl::StrAppend(
          &out, absl::StrFormat(
                    "  %-20s %3d samples  %s\n", fit.name, fit.num_samples,
                    fit.used_defaults
                        ? absl::StrCat("defaults kept: ", fit.note)
                        : absl::StrFormat("rms error %.1f%%, max %.1f%%",
                                          fit.rms_relative_error * 100,
                                          fit.max_relative_error * 100)));
    }
  }
  for (const auto& [model, samples] : report.samples) {
    absl::StrAppend(&out, "profile of ", model, ":\n");
    for (const ProfileSample& sample : samples) {
      if (sample.op == ProfileSample::Op::kActivationMemory) {
        absl::StrAppend(
            &out,
            absl::StrFormat("  %-20s %8.0f tokens, %d recomputed: "
                            "peak %.0f bytes\n",
                            ProfileOpName(sample.op), sample.tokens,
                            sample.checkpointed_layers, sample.measured_bytes));
      } else {
        const bool gemm = sample.op == ProfileSample::Op::kGemm;
        const double size = gemm ? sample.tokens : sample.sum_lengths;
        // Attention samples count forward FLOPs; a backward does 2.5 times.
        const double flops =
            sample.op == ProfileSample::Op::kAttentionBackward
                ? sample.flops * ComputeModel::kBackwardAttentionFactor
                : sample.flops;
        absl::StrAppend(
            &out, absl::StrFormat(
                      "  %-20s %8.0f tokens: %.6g s, %.4g TFLOP/s\n",
                      ProfileOpName(sample.op), size, sample.measured_seconds,
                      flops / sample.measured_seconds / 1e12));
      }
    }
  }
  if (!report.collectives.empty()) {
    absl::StrAppend(&out, "collectives at world size 1:\n");
    for (const CollectiveTiming& timing : report.collectives) {
      absl::StrAppend(&out,
                      absl::StrFormat("  %-15s %12d bytes: %.6g s\n", timing.op,
                                      timing.bytes, timing.seconds));
    }
  }
  for (const std::string& skipped : report.skipped) {
    absl::StrAppend(&out, "skipped: ", skipped, "\n");
  }
  absl::StrAppend(&out, "\n", FormatErrorTable(report.rows));
  return out;
}

}  // namespace dcp
