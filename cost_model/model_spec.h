#ifndef DCP_COST_MODEL_MODEL_SPEC_H_
#define DCP_COST_MODEL_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/struct_fields.h"

namespace dcp {

/// Copies of each of `num_kv_heads` KV heads a Ulysses group of `sp_size`
/// holds so that every rank gets whole heads: sp_size / gcd(num_kv_heads,
/// sp_size), 1 when sp_size divides num_kv_heads.
int UlyssesKvCopiesOf(int num_kv_heads, int sp_size);

/// Architecture of a transformer being trained: a GPT-style decoder (causal,
/// SwiGLU) or a DiT-style video model (full attention, GELU MLP, adaLN).
/// A plain value type; thread-compatible.
struct ModelSpec {
  std::string name;
  int num_layers = 0;
  int64_t hidden_size = 0;
  int num_attention_heads = 0;
  /// Grouped-query attention: key/value heads. A Ulysses SP size must divide
  /// num_attention_heads; one that does not divide this replicates KV heads
  /// (UlyssesKvCopies).
  int num_kv_heads = 0;
  int64_t ffn_hidden_size = 0;
  /// 0 for models without a token embedding / LM head (video DiT).
  int64_t vocab_size = 0;
  /// Bytes per activation / weight element (2 for bf16).
  int dtype_bytes = 2;
  /// Causal attention mask (halves attention FLOPs).
  bool causal = true;
  /// SwiGLU-style MLP with gate and up projections.
  bool gated_mlp = true;
  /// DiT adaLN modulation (6 h x h projections per layer).
  bool adaln_modulation = false;

  int64_t HeadDim() const { return hidden_size / num_attention_heads; }
  /// Width of the K (or V) projection output.
  int64_t KvHiddenSize() const { return HeadDim() * num_kv_heads; }
  /// Parameters of one transformer layer (matrices and norms). These counts
  /// saturate at the int64 maximum instead of wrapping.
  int64_t ParametersPerLayer() const;
  /// Parameters of the whole model, embeddings and head included.
  int64_t ParameterCount() const;
  /// Forward FLOPs of one layer's matrix multiplications per token.
  double LinearForwardFlopsPerToken() const;
  /// Forward attention FLOPs of one layer per squared token of one sequence:
  /// a sequence of L tokens costs this * L^2 (QK^T and AV, halved if causal).
  double AttentionForwardFlopsPerSquaredToken() const;
  /// Forward FLOPs of the LM head per token (0 without a vocabulary).
  double HeadForwardFlopsPerToken() const;
  /// Copies of each KV head an SP group of `sp_size` holds: KV heads are
  /// replicated to lcm(num_kv_heads, sp_size) before the all-to-all.
  int UlyssesKvCopies(int sp_size) const {
    return UlyssesKvCopiesOf(num_kv_heads, sp_size);
  }
  /// Bytes one token sends in the four Ulysses all-to-alls of one layer's
  /// forward pass on an SP group of `sp_size` (Q, K, V in, with K and V
  /// replicated UlyssesKvCopies times; attention output back).
  double UlyssesBytesPerTokenPerLayer(int sp_size) const;
  /// Bytes per token per layer one more copy of the KV heads adds to the
  /// stored activations (K and V after the all-to-all, kept for attention's
  /// backward).
  double KvCopyBytesPerTokenPerLayer() const;
  /// Bytes per token of one layer's stored activations with no recompute
  /// (flash attention: no score matrix), following Korthikanti et al. 2022.
  double ActivationBytesPerTokenPerLayer() const;
  /// Same with selective recompute (attention core and MLP activation
  /// recomputed).
  double SelectiveActivationBytesPerTokenPerLayer() const;
  /// Bytes per token a fully checkpointed layer keeps: its input.
  double CheckpointBytesPerTokenPerLayer() const;
  /// Logits and their fp32 softmax / gradient per token (0 without vocab).
  double LogitsBytesPerToken() const;
  /// Memory-bound element-wise traffic of one layer's forward per token
  /// (norms, rotary, residuals, activation function).
  double ElementwiseBytesPerTokenPerLayer() const;
};

/// Every member of ModelSpec by its name: its key in JSON and the field of
/// dcp.v1.ModelSpec that carries it (common/struct_fields.h).
inline constexpr StructField<ModelSpec> kModelSpecFields[] = {
    {"name", &ModelSpec::name},
    {"num_layers", &ModelSpec::num_layers},
    {"hidden_size", &ModelSpec::hidden_size},
    {"num_attention_heads", &ModelSpec::num_attention_heads},
    {"num_kv_heads", &ModelSpec::num_kv_heads},
    {"ffn_hidden_size", &ModelSpec::ffn_hidden_size},
    {"vocab_size", &ModelSpec::vocab_size},
    {"dtype_bytes", &ModelSpec::dtype_bytes},
    {"causal", &ModelSpec::causal},
    {"gated_mlp", &ModelSpec::gated_mlp},
    {"adaln_modulation", &ModelSpec::adaln_modulation},
};

/// Upper limits of ValidateModelSpec (as powers of two): far beyond any
/// trained model, small enough that parameter, byte and FLOP counts stay
/// exact in int64 and double (at most about 2^61 parameters).
inline constexpr int kLog2MaxModelLayers = 16;
inline constexpr int kLog2MaxModelHiddenSize = 20;
inline constexpr int kLog2MaxModelFfnHiddenSize = 22;
inline constexpr int kLog2MaxModelVocabSize = 26;
inline constexpr int64_t kMaxModelLayers = int64_t{1} << kLog2MaxModelLayers;
inline constexpr int64_t kMaxModelHiddenSize = int64_t{1}
                                               << kLog2MaxModelHiddenSize;
inline constexpr int64_t kMaxModelFfnHiddenSize =
    int64_t{1} << kLog2MaxModelFfnHiddenSize;
inline constexpr int64_t kMaxModelVocabSize = int64_t{1}
                                              << kLog2MaxModelVocabSize;

/// Checks every field; the error names the field, its value and the fix.
absl::Status ValidateModelSpec(const ModelSpec& spec);

/// Names accepted by ModelPreset(): llama3-8b, llama3-70b, video-dit-1b, tiny,
/// tiny-dit.
std::vector<std::string> ModelPresetNames();

/// A built-in model. NotFound lists the known names.
absl::StatusOr<ModelSpec> ModelPreset(absl::string_view name);

/// Parses a JSON object with the ModelSpec field names. Unknown fields are
/// errors (a typo must not silently fall back to a default).
absl::StatusOr<ModelSpec> ModelSpecFromJson(absl::string_view json_text);

/// A model spec file is a JSON object of a few dozen fields.
inline constexpr int64_t kMaxModelFileBytes = int64_t{1} << 20;

/// A preset name, or else a path to a JSON file of at most
/// kMaxModelFileBytes (a directory, a device or a larger file is refused
/// unread).
absl::StatusOr<ModelSpec> LoadModelSpec(absl::string_view preset_or_path);

/// JSON object with every field, parseable by ModelSpecFromJson().
std::string ModelSpecToJson(const ModelSpec& spec);

}  // namespace dcp

#endif  // DCP_COST_MODEL_MODEL_SPEC_H_
