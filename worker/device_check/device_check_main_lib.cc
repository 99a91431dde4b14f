#include "worker/device_check/device_check_main_lib.h"

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/atomic_file.h"
#include "common/command_line.h"
#include "common/main_prologue.h"
#include "common/status_macros.h"
#include "cost_model/model_spec.h"
#include "torch/torch.h"
#include "worker/communication/single_rank_communicator.h"
#include "worker/device_check/device_check.h"
#include "worker/device_check/error_table.h"
#include "worker/libtorch_cuda.h"

namespace dcp {
namespace {

constexpr char kProgram[] = "dcp_device_check";

constexpr FlagSpec kFlags[] = {
    {"device", "cuda|cpu", "cuda",
     "where to run: cuda (GPU 0, bf16 with NCCL) or cpu (fp32 with Gloo)"},
    {"sizes", "h200|tiny", "",
     "sizes of models, profile and micro-batches: h200 (one H200, about 10 "
     "minutes) or tiny (seconds on a CPU); default h200 for cuda, tiny for "
     "cpu"},
    {"models", "NAME,...", "",
     "model presets to run (default llama3-8b,video-dit-1b for h200, "
     "tiny,tiny-dit for tiny)"},
    {"layers", "N", "",
     "layers of every model (default: 2 for llama3-8b, 4 for video-dit-1b, "
     "the preset's own for tiny models)"},
    {"tokens", "T,...", "",
     "micro-batch lengths (one sequence each) of every model, ascending "
     "(default per model and sizes)"},
    {"recompute", "K,...", "",
     "recomputed layers of the micro-batches (default 0 and all layers)"},
    {"attention-lengths", "L,...", "",
     "attention profile lengths, ascending (default 1K..128K for h200)"},
    {"repeats", "N", "",
     "timed runs per measurement (default 5 for the "
     "profile, 3 for micro-batches)"},
    {"profile-budget", "DURATION", "",
     "time the profile of each model may take (default 90s for h200)"},
    {"micro-batch-budget", "DURATION", "",
     "time the micro-batches of each model may take (default 60s for h200)"},
    {"out", "DIR", "",
     "also write the report to DIR/device_check.md and the rows to "
     "DIR/device_check.tsv"},
    {"seed", "N", "0", "seeds weights and inputs"},
};

const ProgramSpec& Program() {
  static const auto* const program = new ProgramSpec{
      kProgram,
      "dcp_device_check: on one device, profiles the GEMMs, the fused "
      "attention core and activation memory (one rank: no collectives, no "
      "NCCL); fits the cost model to them; runs micro-batches of each model "
      "at several lengths and recompute settings; prints predicted and "
      "measured seconds and peak bytes per micro-batch, and the median and "
      "worst relative error. scripts/device_check.sh packs and runs it.",
      kFlags,
      "Exit codes: 0 ok; 1 a phase failed or no micro-batch ran; 2 a usage "
      "error, or --device=cuda without a CUDA build or a visible GPU.\n"};
  return *program;
}

// The sizes of one --sizes preset.
struct Sizes {
  std::vector<std::string> models;
  ProfileOptions profile;
  int micro_batch_repeats = 3;
  absl::Duration profile_budget;
  absl::Duration micro_batch_budget;
};

Sizes H200Sizes() {
  Sizes sizes;
  sizes.models = {"llama3-8b", "video-dit-1b"};
  sizes.profile.repeats = 5;
  sizes.profile.warmup = 2;
  sizes.profile.gemm_tokens = {256, 1024, 4096, 16384};
  sizes.profile.attention_lengths = {1024, 4096, 16384, 32768, 65536, 131072};
  sizes.profile.memory_tokens = {4096, 8192, 16384};
  sizes.profile.memory_sequence_tokens = 4096;
  sizes.profile.collective_timeout = absl::Seconds(120);
  // Both models' phases in about 5 minutes, so that the run fits its
  // 6-minute limit (scripts/device_check.sh) and a second try fits a
  // 15-minute device loan.
  sizes.profile_budget = absl::Seconds(90);
  sizes.micro_batch_budget = absl::Seconds(60);
  return sizes;
}

Sizes TinySizes() {
  Sizes sizes;
  sizes.models = {"tiny", "tiny-dit"};
  sizes.profile.repeats = 3;
  sizes.profile.warmup = 1;
  sizes.profile.gemm_tokens = {1, 8, 64, 256};
  sizes.profile.attention_lengths = {16, 32, 64, 128};
  sizes.profile.memory_tokens = {128, 256};
  sizes.profile.memory_sequence_tokens = 64;
  sizes.micro_batch_repeats = 2;
  sizes.profile_budget = absl::Seconds(60);
  sizes.micro_batch_budget = absl::Seconds(60);
  return sizes;
}

// The reduced depth of a model at h200 sizes.
int DefaultLayers(const ModelSpec& spec, bool h200) {
  if (!h200) return spec.num_layers;
  return spec.name == "llama3-8b" ? 2 : std::min(spec.num_layers, 4);
}

std::vector<int64_t> DefaultTokens(const ModelSpec& spec, bool h200) {
  if (!h200) return {32, 128};
  if (spec.vocab_size > 0) {
    // The LM head's logits (bf16, and fp32 for the loss) of 128K tokens
    // over llama3's 128K vocabulary would not fit: 32K at most.
    return {4096, 16384, 32768};
  }
  return {4096, 16384, 65536};
}

absl::Duration DurationOr(const ParsedFlags& flags, const char* name,
                          absl::Duration fallback, absl::Status& error) {
  if (!flags.Given(name)) return fallback;
  absl::StatusOr<absl::Duration> value = flags.Duration(name);
  if (!value.ok()) {
    error = value.status();
    return fallback;
  }
  return *value;
}

absl::StatusOr<DeviceCheckOptions> Configure(const ParsedFlags& flags,
                                             bool cuda) {
  DeviceCheckOptions options;
  options.device = cuda ? torch::Device(torch::kCUDA, 0) : torch::kCPU;
  options.precision =
      cuda ? TrainingPrecision::kBf16 : TrainingPrecision::kFp32;
  const std::string sizes_name =
      flags.Given("sizes") ? flags.String("sizes") : (cuda ? "h200" : "tiny");
  if (sizes_name != "h200" && sizes_name != "tiny") {
    return absl::InvalidArgumentError(
        absl::StrCat("--sizes=", sizes_name, ": must be one of h200, tiny"));
  }
  const bool h200 = sizes_name == "h200";
  Sizes sizes = h200 ? H200Sizes() : TinySizes();
  if (flags.Given("models")) {
    DCP_ASSIGN_OR_RETURN(sizes.models, flags.StringList("models"));
  }
  if (flags.Given("attention-lengths")) {
    DCP_ASSIGN_OR_RETURN(sizes.profile.attention_lengths,
                         flags.IntList("attention-lengths"));
  }
  if (flags.Given("repeats")) {
    DCP_ASSIGN_OR_RETURN(const int repeats, flags.Int32("repeats", 1, 1000));
    sizes.profile.repeats = repeats;
    sizes.micro_batch_repeats = repeats;
  }
  absl::Status duration_error;
  options.profile_budget =
      DurationOr(flags, "profile-budget", sizes.profile_budget, duration_error);
  options.micro_batch_budget = DurationOr(
      flags, "micro-batch-budget", sizes.micro_batch_budget, duration_error);
  DCP_RETURN_IF_ERROR(duration_error);
  DCP_ASSIGN_OR_RETURN(options.seed, flags.Uint64("seed"));

  for (const std::string& name : sizes.models) {
    ModelCase model_case;
    absl::StatusOr<ModelSpec> spec = ModelPreset(name);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--models: ", spec.status().message()));
    }
    model_case.spec = *spec;
    if (flags.Given("layers")) {
      DCP_ASSIGN_OR_RETURN(model_case.spec.num_layers,
                           flags.Int32("layers", 1, spec->num_layers));
    } else {
      model_case.spec.num_layers = DefaultLayers(*spec, h200);
    }
    if (flags.Given("tokens")) {
      DCP_ASSIGN_OR_RETURN(model_case.micro_batch_tokens,
                           flags.IntList("tokens"));
    } else {
      model_case.micro_batch_tokens = DefaultTokens(*spec, h200);
    }
    if (flags.Given("recompute")) {
      DCP_ASSIGN_OR_RETURN(
          const std::vector<int64_t> layers,
          flags.IntList("recompute", 0, model_case.spec.num_layers));
      model_case.checkpointed_layers.assign(layers.begin(), layers.end());
    } else {
      model_case.checkpointed_layers = {0, model_case.spec.num_layers};
    }
    options.models.push_back(model_case);
  }
  options.profile = sizes.profile;
  options.micro_batch_repeats = sizes.micro_batch_repeats;
  options.cluster = H200Cluster(/*num_nodes=*/1, /*gpus_per_node=*/1);
  DCP_RETURN_IF_ERROR(ValidateDeviceCheckOptions([&] {
    DeviceCheckOptions checked = options;
    checked.log = [](const std::string&) {};
    return checked;
  }()));
  return options;
}

// Why --device=cuda cannot run here, or OK.
absl::Status CheckCudaUsable() {
#if DCP_LIBTORCH_HAS_CUDA
  if (!torch::cuda::is_available()) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=cuda: no CUDA GPU is visible (torch::cuda::is_available() "
        "is false",
        visible != nullptr ? absl::StrCat("; CUDA_VISIBLE_DEVICES=", visible)
                           : "",
        "): run it on a machine with a GPU, or check the CPU pipeline with "
        "--device=cpu"));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(
      "--device=cuda: this dcp_device_check was built without CUDA (build "
      "it with `bazel build --config=cuda //worker/device_check:"
      "dcp_device_check` or `scripts/device_check.sh pack`), or check the "
      "CPU pipeline with --device=cpu");
#endif
}

}  // namespace

int RunDeviceCheckMain(int argc, char** argv) {
  const MainStart start = StartMain(Program(), argc, argv);
  if (!start.flags.has_value()) return start.exit_code;
  const ParsedFlags& flags = *start.flags;
  const std::string device = flags.String("device");
  if (device != "cuda" && device != "cpu") {
    return PrintUsageError(
        std::cerr, kProgram,
        absl::StrCat("--device=", device, ": must be one of cuda, cpu"),
        kProgram);
  }
  const bool cuda = device == "cuda";
  if (cuda) {
    if (absl::Status usable = CheckCudaUsable(); !usable.ok()) {
      return PrintUsageError(std::cerr, kProgram, usable.message());
    }
  }
  absl::StatusOr<DeviceCheckOptions> options = Configure(flags, cuda);
  if (!options.ok()) {
    return PrintUsageError(std::cerr, kProgram, options.status().message(),
                           kProgram);
  }
  const absl::Time started = absl::Now();
  options->log = [started](const std::string& line) {
    std::cerr << absl::StrFormat("[%7.1fs] %s\n",
                                 absl::ToDoubleSeconds(absl::Now() - started),
                                 line)
              << std::flush;
  };

  // Where --out is given, the rows measured so far are rewritten after
  // each one, so that a run stopped by its time limit keeps them.
  std::string write_error;
  if (flags.Given("out")) {
    const std::string tsv = absl::StrCat(flags.String("out"), "/device_check.tsv");
    options->on_row = [tsv, &write_error](const std::vector<CheckRow>& rows) {
      absl::Status written =
          WriteFileAtomically(tsv, FormatErrorTableTsv(rows));
      if (!written.ok() && write_error.empty()) {
        write_error = std::string(written.message());
        std::cerr << kProgram << ": writing " << tsv << ": " << write_error
                  << "\n";
      }
    };
  }
  // One rank: no collective needs a backend, so neither NCCL nor Gloo.
  SingleRankCommunicator communicator;
  absl::StatusOr<DeviceCheckReport> report =
      RunDeviceCheck(*options, communicator);
  if (!report.ok()) {
    return PrintFailure(std::cerr, kProgram, report.status().ToString());
  }
  const std::string text = absl::StrCat(
      "device check on ", cuda ? "cuda:0 (bf16)" : "the CPU (fp32)", ", ",
      absl::StrFormat("%.1f s", absl::ToDoubleSeconds(absl::Now() - started)),
      "\n", FormatDeviceCheckReport(*report));
  std::cout << text << std::flush;
  if (flags.Given("out")) {
    const std::string dir = flags.String("out");
    for (const auto& [name, contents] :
         std::vector<std::pair<std::string, std::string>>{
             {"device_check.md", text},
             {"device_check.tsv", FormatErrorTableTsv(report->rows)}}) {
      if (absl::Status written =
              WriteFileAtomically(absl::StrCat(dir, "/", name), contents);
          !written.ok()) {
        return PrintFailure(
            std::cerr, kProgram,
            absl::StrCat("--out=", dir, ": ", written.message()));
      }
    }
  }
  if (report->rows.empty()) {
    return PrintFailure(std::cerr, kProgram,
                        "no micro-batch ran (see the skipped lines); raise "
                        "--micro-batch-budget or lower --tokens");
  }
  return kExitOk;
}

}  // namespace dcp
