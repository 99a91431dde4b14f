#include "cost_model/model_spec.h"

#include <unistd.h>

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/command_line.h"
#include "common/struct_json.h"
#include "cost_model/saturating_math.h"
#include "nlohmann/json.hpp"

namespace dcp {

// Saturating, so that a spec beyond the limits ValidateModelSpec enforces
// counts as too large rather than wrapping to a small or negative count.
int64_t ModelSpec::ParametersPerLayer() const {
  const int64_t h = hidden_size;
  const int64_t h2 = SaturatingMul(h, h);
  const int64_t attention = SaturatingAdd(
      SaturatingMul(2, h2), SaturatingMul(2, SaturatingMul(h, KvHiddenSize())));
  const int64_t mlp =
      SaturatingMul(gated_mlp ? 3 : 2, SaturatingMul(h, ffn_hidden_size));
  const int64_t norms = SaturatingMul(2, h);
  const int64_t modulation = adaln_modulation ? SaturatingMul(6, h2) : 0;
  return SaturatingAdd(SaturatingAdd(attention, mlp),
                       SaturatingAdd(norms, modulation));
}

int64_t ModelSpec::ParameterCount() const {
  // Untied input embedding and LM head, plus the final norm.
  return SaturatingAdd(
      SaturatingAdd(SaturatingMul(num_layers, ParametersPerLayer()),
                    SaturatingMul(2, SaturatingMul(vocab_size, hidden_size))),
      hidden_size);
}

double ModelSpec::LinearForwardFlopsPerToken() const {
  const double h = static_cast<double>(hidden_size);
  const double matrices = 2 * h * h + 2 * h * KvHiddenSize() +
                          (gated_mlp ? 3 : 2) * h * ffn_hidden_size;
  // adaLN modulation runs once per sample, not per token.
  return 2 * matrices;
}

double ModelSpec::AttentionForwardFlopsPerSquaredToken() const {
  return 4.0 * static_cast<double>(hidden_size) * (causal ? 0.5 : 1.0);
}

double ModelSpec::HeadForwardFlopsPerToken() const {
  return 2.0 * static_cast<double>(hidden_size) * vocab_size;
}

int UlyssesKvCopiesOf(int num_kv_heads, int sp_size) {
  if (sp_size <= 1 || num_kv_heads <= 0) return 1;
  return sp_size / std::gcd(num_kv_heads, sp_size);
}

double ModelSpec::UlyssesBytesPerTokenPerLayer(int sp_size) const {
  return dtype_bytes * static_cast<double>(2 * hidden_size) +
         UlyssesKvCopies(sp_size) * KvCopyBytesPerTokenPerLayer();
}

double ModelSpec::KvCopyBytesPerTokenPerLayer() const {
  return dtype_bytes * static_cast<double>(2 * KvHiddenSize());
}

double ModelSpec::ActivationBytesPerTokenPerLayer() const {
  const double h = static_cast<double>(hidden_size);
  const double f = static_cast<double>(ffn_hidden_size);
  const double norms = 2 * h;
  // QKV input, Q, K, V, output-projection input (flash attention keeps no
  // score matrix).
  const double attention = 3 * h + 2 * KvHiddenSize();
  // First-projection input, then gate+up outputs and the activation output
  // (gated) or activation input and output (plain).
  const double mlp = h + (gated_mlp ? 3 * f : 2 * f);
  return dtype_bytes * (norms + attention + mlp);
}

double ModelSpec::SelectiveActivationBytesPerTokenPerLayer() const {
  return ActivationBytesPerTokenPerLayer() -
         dtype_bytes * static_cast<double>(ffn_hidden_size + hidden_size);
}

double ModelSpec::CheckpointBytesPerTokenPerLayer() const {
  return dtype_bytes * static_cast<double>(hidden_size);
}

double ModelSpec::LogitsBytesPerToken() const {
  // Logits in the training dtype plus their fp32 softmax for the loss.
  return static_cast<double>(vocab_size) * (dtype_bytes + 4);
}

double ModelSpec::ElementwiseBytesPerTokenPerLayer() const {
  const double h = static_cast<double>(hidden_size);
  const double f = static_cast<double>(ffn_hidden_size);
  const double norms = 2 * 2 * h;
  const double rotary = causal ? 2 * (h + KvHiddenSize()) : 0;
  const double residuals = 2 * 3 * h;
  const double activation = gated_mlp ? 3 * f : 2 * f;
  return dtype_bytes * (norms + rotary + residuals + activation);
}

absl::Status ValidateModelSpec(const ModelSpec& spec) {
  auto bad = [&](absl::string_view field, auto value, absl::string_view fix) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", spec.name, "': ", field, " = ", value, " is invalid: ", fix));
  };
  // Upper limits far beyond any trained model keep every count the cost
  // model derives (parameters, bytes, FLOPs) exact in int64 and double.
  auto too_large = [&](absl::string_view field, int64_t value, int log2_limit) {
    return bad(field, value,
               absl::StrCat("must be at most 2^", log2_limit, " (",
                            int64_t{1} << log2_limit,
                            "); no trainable model is that large"));
  };
  if (spec.num_layers <= 0)
    return bad("num_layers", spec.num_layers, "must be at least 1");
  if (spec.num_layers > kMaxModelLayers)
    return too_large("num_layers", spec.num_layers, kLog2MaxModelLayers);
  if (spec.hidden_size <= 0)
    return bad("hidden_size", spec.hidden_size, "must be positive");
  if (spec.hidden_size > kMaxModelHiddenSize)
    return too_large("hidden_size", spec.hidden_size, kLog2MaxModelHiddenSize);
  if (spec.num_attention_heads <= 0)
    return bad("num_attention_heads", spec.num_attention_heads,
               "must be positive");
  if (spec.hidden_size % spec.num_attention_heads != 0)
    return bad("hidden_size", spec.hidden_size,
               absl::StrCat("must be a multiple of num_attention_heads (",
                            spec.num_attention_heads, ")"));
  if (spec.num_kv_heads <= 0 ||
      spec.num_attention_heads % spec.num_kv_heads != 0)
    return bad("num_kv_heads", spec.num_kv_heads,
               absl::StrCat("must be positive and divide num_attention_heads (",
                            spec.num_attention_heads, ")"));
  if (spec.ffn_hidden_size <= 0)
    return bad("ffn_hidden_size", spec.ffn_hidden_size, "must be positive");
  if (spec.ffn_hidden_size > kMaxModelFfnHiddenSize)
    return too_large("ffn_hidden_size", spec.ffn_hidden_size,
                     kLog2MaxModelFfnHiddenSize);
  if (spec.vocab_size < 0)
    return bad("vocab_size", spec.vocab_size, "must be 0 (no LM head) or more");
  if (spec.vocab_size > kMaxModelVocabSize)
    return too_large("vocab_size", spec.vocab_size, kLog2MaxModelVocabSize);
  if (spec.dtype_bytes != 1 && spec.dtype_bytes != 2 && spec.dtype_bytes != 4)
    return bad("dtype_bytes", spec.dtype_bytes, "must be 1, 2 or 4");
  return absl::OkStatus();
}

namespace {

// A built-in model: a GPT-style decoder or a DiT-style video model.
struct Preset {
  const char* name;
  int num_layers;
  int64_t hidden_size;
  int num_attention_heads;
  int num_kv_heads;
  int64_t ffn_hidden_size;
  int64_t vocab_size;
  // Full attention, GELU MLP and adaLN modulation instead of the decoder's
  // causal mask and SwiGLU.
  bool video_dit;
};

constexpr Preset kPresets[] = {
    {"llama3-8b", 32, 4096, 32, 8, 14336, 128256, /*video_dit=*/false},
    {"llama3-70b", 80, 8192, 64, 8, 28672, 128256, /*video_dit=*/false},
    // Open-Sora-class DiT: full attention over all spatio-temporal tokens.
    {"video-dit-1b", 28, 1152, 16, 16, 4608, 0, /*video_dit=*/true},
    // Small enough to train on CPU in tests and the demo job.
    {"tiny", 2, 64, 4, 2, 128, 256, /*video_dit=*/false},
    // video-dit-1b's architecture at the size of `tiny`: CPU tests and the
    // demo job train it on latent patches.
    {"tiny-dit", 2, 64, 4, 4, 256, 0, /*video_dit=*/true},
};

}  // namespace

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> names;
  for (const Preset& preset : kPresets) names.push_back(preset.name);
  return names;
}

absl::StatusOr<ModelSpec> ModelPreset(absl::string_view name) {
  for (const Preset& preset : kPresets) {
    if (name != preset.name) continue;
    ModelSpec spec;
    spec.name = preset.name;
    spec.num_layers = preset.num_layers;
    spec.hidden_size = preset.hidden_size;
    spec.num_attention_heads = preset.num_attention_heads;
    spec.num_kv_heads = preset.num_kv_heads;
    spec.ffn_hidden_size = preset.ffn_hidden_size;
    spec.vocab_size = preset.vocab_size;
    spec.causal = !preset.video_dit;
    spec.gated_mlp = !preset.video_dit;
    spec.adaln_modulation = preset.video_dit;
    return spec;
  }
  return absl::NotFoundError(absl::StrCat(
      "unknown model preset '", name,
      "'; known presets: ", absl::StrJoin(ModelPresetNames(), ", "),
      ", or pass a path to a JSON model spec"));
}

absl::StatusOr<ModelSpec> ModelSpecFromJson(absl::string_view json_text) {
  nlohmann::json json =
      nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr,
                            /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(
        "model spec is not a JSON object; expected e.g. "
        "{\"name\": \"m\", \"num_layers\": 32, \"hidden_size\": 4096, ...}");
  }
  ModelSpec spec;
  absl::Status read =
      StructFromJson<ModelSpec>(kModelSpecFields, json, "model spec", spec);
  if (!read.ok()) return read;
  if (spec.name.empty()) spec.name = "custom";
  absl::Status valid = ValidateModelSpec(spec);
  if (!valid.ok()) return valid;
  return spec;
}

absl::StatusOr<ModelSpec> LoadModelSpec(absl::string_view preset_or_path) {
  absl::StatusOr<ModelSpec> preset = ModelPreset(preset_or_path);
  if (preset.ok()) return preset;
  const std::string path(preset_or_path);
  if (access(path.c_str(), R_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(
        "--model='", preset_or_path, "' is neither a preset (",
        absl::StrJoin(ModelPresetNames(), ", "), ") nor a readable file"));
  }
  // Bounded: --model=/dev/zero or a multi-GiB file is refused unread.
  absl::StatusOr<std::string> text =
      ReadFlagFile("model", path, kMaxModelFileBytes);
  if (!text.ok()) return text.status();
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(*text);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(),
                        absl::StrCat(preset_or_path, ": ",
                                     spec.status().message()));
  }
  return spec;
}

std::string ModelSpecToJson(const ModelSpec& spec) {
  return StructToJson<ModelSpec>(kModelSpecFields, spec).dump();
}

}  // namespace dcp
