#include "cost_model/model_spec.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/struct_fields_testing.h"
#include "cost_model/cluster_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

void ExpectSameModel(const ModelSpec& a, const ModelSpec& b) {
  testing::ExpectEveryFieldEq<ModelSpec>(kModelSpecFields, a, b);
}

void ExpectSameCluster(const ClusterSpec& a, const ClusterSpec& b) {
  testing::ExpectEveryFieldEq<ClusterSpec>(kClusterSpecFields, a, b);
}

// A spec named `name` of these sizes; the other fields keep their defaults.
ModelSpec SizedSpec(const std::string& name, int num_layers,
                    int64_t hidden_size, int num_attention_heads,
                    int num_kv_heads, int64_t ffn_hidden_size,
                    int64_t vocab_size) {
  ModelSpec spec;
  spec.name = name;
  spec.num_layers = num_layers;
  spec.hidden_size = hidden_size;
  spec.num_attention_heads = num_attention_heads;
  spec.num_kv_heads = num_kv_heads;
  spec.ffn_hidden_size = ffn_hidden_size;
  spec.vocab_size = vocab_size;
  return spec;
}

// A file under the test's temporary directory, removed on destruction.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& contents)
      : path_(::testing::TempDir() + "/" + name) {
    std::ofstream file(path_);
    file << contents;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ModelPresetTest, Llama3ParameterCountsMatchPublishedSizes) {
  const ModelSpec llama8b = ModelPreset("llama3-8b").value();
  EXPECT_NEAR(llama8b.ParameterCount() / 8.03e9, 1.0, 0.01);
  const ModelSpec llama70b = ModelPreset("llama3-70b").value();
  EXPECT_NEAR(llama70b.ParameterCount() / 70.6e9, 1.0, 0.01);
  EXPECT_EQ(llama8b.HeadDim(), 128);
  EXPECT_EQ(llama70b.HeadDim(), 128);
  EXPECT_EQ(llama8b.KvHiddenSize(), 1024);
}

TEST(ModelPresetTest, VideoDitIsANonCausalModelWithoutVocabulary) {
  const ModelSpec dit = ModelPreset("video-dit-1b").value();
  EXPECT_TRUE(ValidateModelSpec(dit).ok());
  EXPECT_FALSE(dit.causal);
  EXPECT_FALSE(dit.gated_mlp);
  EXPECT_TRUE(dit.adaln_modulation);
  EXPECT_EQ(dit.vocab_size, 0);
  EXPECT_EQ(dit.HeadForwardFlopsPerToken(), 0);
  EXPECT_EQ(dit.LogitsBytesPerToken(), 0);
  // A ~1B-class DiT (Open-Sora's 28 x 1152 is about 0.7B).
  EXPECT_GT(dit.ParameterCount(), 0.5e9);
  EXPECT_LT(dit.ParameterCount(), 1.5e9);
  // Full attention costs twice what a causal mask of the same width would.
  ModelSpec causal = dit;
  causal.causal = true;
  EXPECT_DOUBLE_EQ(dit.AttentionForwardFlopsPerSquaredToken(),
                   2 * causal.AttentionForwardFlopsPerSquaredToken());
}

TEST(ModelPresetTest, TinyIsSmallAndValid) {
  const ModelSpec tiny = ModelPreset("tiny").value();
  EXPECT_TRUE(ValidateModelSpec(tiny).ok());
  EXPECT_GT(tiny.ParameterCount(), 0);
  EXPECT_LT(tiny.ParameterCount(), 1'000'000);
}

TEST(ModelPresetTest, TinyDitIsVideoDitsArchitectureAtTinysSize) {
  const ModelSpec tiny_dit = ModelPreset("tiny-dit").value();
  const ModelSpec dit = ModelPreset("video-dit-1b").value();
  EXPECT_TRUE(ValidateModelSpec(tiny_dit).ok());
  EXPECT_EQ(tiny_dit.causal, dit.causal);
  EXPECT_EQ(tiny_dit.gated_mlp, dit.gated_mlp);
  EXPECT_EQ(tiny_dit.adaln_modulation, dit.adaln_modulation);
  EXPECT_EQ(tiny_dit.vocab_size, 0);
  EXPECT_EQ(tiny_dit.num_kv_heads, tiny_dit.num_attention_heads);
  EXPECT_GT(tiny_dit.ParameterCount(), 0);
  EXPECT_LT(tiny_dit.ParameterCount(), 1'000'000);
}

TEST(ModelPresetTest, EveryListedPresetLoadsAndValidates) {
  ASSERT_EQ(ModelPresetNames().size(), 5u);
  for (const std::string& name : ModelPresetNames()) {
    absl::StatusOr<ModelSpec> spec = ModelPreset(name);
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    EXPECT_EQ(spec->name, name);
    EXPECT_TRUE(ValidateModelSpec(*spec).ok()) << name;
  }
}

TEST(ModelPresetTest, UnknownPresetListsKnownNames) {
  absl::StatusOr<ModelSpec> spec = ModelPreset("llama4-9000b");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(spec.status().message(), HasSubstr("llama4-9000b"));
  for (const std::string& name : ModelPresetNames()) {
    EXPECT_THAT(spec.status().message(), HasSubstr(name));
  }
}

TEST(ModelSpecJsonTest, RoundTripsEveryPreset) {
  for (const std::string& name : ModelPresetNames()) {
    const ModelSpec spec = ModelPreset(name).value();
    absl::StatusOr<ModelSpec> parsed = ModelSpecFromJson(ModelSpecToJson(spec));
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    ExpectSameModel(*parsed, spec);
  }
}

TEST(ModelSpecJsonTest, RoundTripsNonDefaultFields) {
  ModelSpec spec = ModelPreset("tiny").value();
  spec.name = "custom-fp32";
  spec.dtype_bytes = 4;
  spec.causal = false;
  spec.gated_mlp = false;
  spec.adaln_modulation = true;
  spec.vocab_size = 0;
  absl::StatusOr<ModelSpec> parsed = ModelSpecFromJson(ModelSpecToJson(spec));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameModel(*parsed, spec);
}

TEST(ModelSpecJsonTest, UnknownFieldIsNamed) {
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(
      R"({"num_layers": 2, "hidden_sise": 64, "num_attention_heads": 4,
          "num_kv_heads": 2, "ffn_hidden_size": 128})");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("'hidden_sise'"));
  EXPECT_THAT(spec.status().message(), HasSubstr("hidden_size"));
}

TEST(ModelSpecJsonTest, WrongTypeIsNamed) {
  const std::string base = ModelSpecToJson(ModelPreset("tiny").value());
  struct Case {
    std::string field;
    std::string bad_value;
  };
  for (const Case& c : std::vector<Case>{{"num_layers", "\"32\""},
                                         {"hidden_size", "64.5"},
                                         {"causal", "1"},
                                         {"name", "7"}}) {
    // Replace the field's value in an otherwise valid spec (compact JSON:
    // "field":value followed by ',' or '}').
    const std::string key = "\"" + c.field + "\":";
    const size_t begin = base.find(key);
    ASSERT_NE(begin, std::string::npos) << base;
    const size_t value_begin = begin + key.size();
    const size_t value_end = base.find_first_of(",}", value_begin);
    std::string json = base;
    json.replace(value_begin, value_end - value_begin, c.bad_value);
    absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(json);
    ASSERT_FALSE(spec.ok()) << c.field;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(spec.status().message(), HasSubstr("'" + c.field + "'"));
  }
}

TEST(ModelSpecJsonTest, InvalidValueIsNamed) {
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(
      R"({"num_layers": 0, "hidden_size": 64, "num_attention_heads": 4,
          "num_kv_heads": 2, "ffn_hidden_size": 128})");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("num_layers = 0"));

  spec = ModelSpecFromJson(
      R"({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
          "num_kv_heads": 3, "ffn_hidden_size": 128})");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("num_kv_heads = 3"));

  spec = ModelSpecFromJson(
      R"({"num_layers": 2, "hidden_size": 66, "num_attention_heads": 4,
          "num_kv_heads": 2, "ffn_hidden_size": 128})");
  EXPECT_THAT(spec.status().message(), HasSubstr("hidden_size = 66"));

  spec = ModelSpecFromJson(
      R"({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
          "num_kv_heads": 2, "ffn_hidden_size": 128, "dtype_bytes": 3})");
  EXPECT_THAT(spec.status().message(), HasSubstr("dtype_bytes = 3"));
}

// Sizes whose products overflow int64 once wrapped the parameter count to a
// small or negative number (a plan at "peak memory 0.0%", "-993.8 GiB of
// model state"); they are now named as too large.
TEST(ModelSpecJsonTest, AbsurdSizesAreRejectedNamingFieldAndLimit) {
  struct Case {
    std::string json;
    std::string expected;
  };
  const Case cases[] = {
      {R"({"num_layers": 2, "hidden_size": 2147483520, "num_attention_heads": 32,
           "num_kv_heads": 32, "ffn_hidden_size": 2147483647,
           "vocab_size": 2147483647})",
       "hidden_size = 2147483520 is invalid: must be at most 2^20 (1048576)"},
      {R"({"num_layers": 2147483647, "hidden_size": 64,
           "num_attention_heads": 1, "num_kv_heads": 1,
           "ffn_hidden_size": 64})",
       "num_layers = 2147483647 is invalid: must be at most 2^16 (65536)"},
      {R"({"num_layers": 8, "hidden_size": 4096, "num_attention_heads": 32,
           "num_kv_heads": 8, "ffn_hidden_size": 2147483647})",
       "ffn_hidden_size = 2147483647 is invalid: must be at most 2^22"},
      {R"({"num_layers": 8, "hidden_size": 4096, "num_attention_heads": 32,
           "num_kv_heads": 8, "ffn_hidden_size": 14336,
           "vocab_size": 2147483647})",
       "vocab_size = 2147483647 is invalid: must be at most 2^26"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(c.json);
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument)
        << c.json;
    EXPECT_THAT(spec.status().message(), HasSubstr(c.expected));
  }
  // At the limits every count is still exact and positive.
  ModelSpec largest = SizedSpec("largest", static_cast<int>(kMaxModelLayers),
                                kMaxModelHiddenSize,
                                /*num_attention_heads=*/1, /*num_kv_heads=*/1,
                                kMaxModelFfnHiddenSize, kMaxModelVocabSize);
  largest.adaln_modulation = true;
  ASSERT_TRUE(ValidateModelSpec(largest).ok());
  const int64_t h = kMaxModelHiddenSize;
  const int64_t per_layer = 2 * h * h + 2 * h * h + 3 * h * kMaxModelFfnHiddenSize +
                            2 * h + 6 * h * h;
  EXPECT_EQ(largest.ParametersPerLayer(), per_layer);
  EXPECT_EQ(largest.ParameterCount(), kMaxModelLayers * per_layer +
                                          2 * kMaxModelVocabSize * h + h);
}

TEST(ModelSpecTest, ParameterCountSaturatesInsteadOfWrapping) {
  // Not validated: the counts must still not wrap.
  ModelSpec spec =
      SizedSpec("huge", /*num_layers=*/2, /*hidden_size=*/2147483520,
                /*num_attention_heads=*/32, /*num_kv_heads=*/32,
                /*ffn_hidden_size=*/2147483647, /*vocab_size=*/2147483647);
  EXPECT_EQ(spec.ParametersPerLayer(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(spec.ParameterCount(), std::numeric_limits<int64_t>::max());
  spec.num_layers = std::numeric_limits<int>::max();
  spec.hidden_size = 1 << 30;
  spec.ffn_hidden_size = 14336;
  spec.vocab_size = 0;
  EXPECT_EQ(spec.ParameterCount(), std::numeric_limits<int64_t>::max());
}

TEST(ModelSpecJsonTest, NotAnObjectIsRejected) {
  EXPECT_EQ(ModelSpecFromJson("[1, 2]").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ModelSpecFromJson("{not json").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LoadModelSpecTest, LoadsPreset) {
  absl::StatusOr<ModelSpec> spec = LoadModelSpec("llama3-70b");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ExpectSameModel(*spec, ModelPreset("llama3-70b").value());
}

TEST(LoadModelSpecTest, LoadsJsonFile) {
  ModelSpec want = ModelPreset("llama3-8b").value();
  want.name = "llama3-8b-4layers";
  want.num_layers = 4;
  const TempFile file("model_spec_test_model.json", ModelSpecToJson(want));
  absl::StatusOr<ModelSpec> spec = LoadModelSpec(file.path());
  ASSERT_TRUE(spec.ok()) << spec.status();
  ExpectSameModel(*spec, want);
}

TEST(LoadModelSpecTest, BadJsonFileErrorNamesPathAndField) {
  const TempFile file("model_spec_test_bad.json",
                      R"({"name": "m", "num_layers": -1})");
  absl::StatusOr<ModelSpec> spec = LoadModelSpec(file.path());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr(file.path()));
  EXPECT_THAT(spec.status().message(), HasSubstr("num_layers"));
}

TEST(LoadModelSpecTest, ADeviceADirectoryOrAnOversizedFileIsRefusedUnread) {
  // A JSON object padded past the bound.
  const TempFile big(
      "model_spec_test_big.json",
      "{\"name\": \"" + std::string(kMaxModelFileBytes, 'x') + "\"}");
  // /dev/zero never ends: read whole, it took 4 GB before failing.
  for (const std::string& path :
       {std::string("/dev/zero"), ::testing::TempDir(), big.path()}) {
    absl::StatusOr<ModelSpec> spec = LoadModelSpec(path);
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(spec.status().message(), HasSubstr("--model=" + path));
  }
}

TEST(LoadModelSpecTest, MissingPathListsPresets) {
  const std::string path = ::testing::TempDir() + "/no/such/model.json";
  absl::StatusOr<ModelSpec> spec = LoadModelSpec(path);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(spec.status().message(), HasSubstr(path));
  for (const std::string& name : ModelPresetNames()) {
    EXPECT_THAT(spec.status().message(), HasSubstr(name));
  }
}

// Korthikanti et al. 2022: 34h bytes per token per layer in 16-bit with flash
// attention, of which 2h are dropout masks that this model does not keep.
TEST(ActivationBytesTest, GptStyleLayerKeeps32HiddenBytesPerToken) {
  ModelSpec gpt = SizedSpec("gpt", /*num_layers=*/24, /*hidden_size=*/2048,
                            /*num_attention_heads=*/16, /*num_kv_heads=*/16,
                            /*ffn_hidden_size=*/4 * 2048,
                            /*vocab_size=*/50257);
  gpt.gated_mlp = false;
  gpt.dtype_bytes = 2;
  ASSERT_TRUE(ValidateModelSpec(gpt).ok());
  EXPECT_DOUBLE_EQ(gpt.ActivationBytesPerTokenPerLayer(), 32.0 * 2048);
  // Full recompute keeps the 2h-byte layer input.
  EXPECT_DOUBLE_EQ(gpt.CheckpointBytesPerTokenPerLayer(), 2.0 * 2048);
  EXPECT_LT(gpt.SelectiveActivationBytesPerTokenPerLayer(),
            gpt.ActivationBytesPerTokenPerLayer());
  EXPECT_GT(gpt.SelectiveActivationBytesPerTokenPerLayer(),
            gpt.CheckpointBytesPerTokenPerLayer());
}

TEST(ClusterSpecTest, H200DefaultsAreValid) {
  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/8);
  EXPECT_TRUE(ValidateClusterSpec(cluster).ok());
  EXPECT_EQ(cluster.NumGpus(), 32);
  EXPECT_DOUBLE_EQ(cluster.MemoryBudgetBytes(),
                   cluster.gpu_memory_bytes * cluster.usable_memory_fraction);
}

TEST(ClusterSpecTest, ValidationNamesTheField) {
  struct Case {
    std::string field;
    void (*corrupt)(ClusterSpec&);
  };
  const std::vector<Case> cases = {
      {"num_nodes", [](ClusterSpec& c) { c.num_nodes = 0; }},
      {"gpus_per_node", [](ClusterSpec& c) { c.gpus_per_node = -8; }},
      {"usable_memory_fraction",
       [](ClusterSpec& c) { c.usable_memory_fraction = 1.5; }},
      {"usable_memory_fraction",
       [](ClusterSpec& c) {
         c.usable_memory_fraction = std::numeric_limits<double>::quiet_NaN();
       }},
      {"gpu_memory_bytes", [](ClusterSpec& c) { c.gpu_memory_bytes = -1; }},
      // 2^16 x 2^16 GPUs would wrap NumGpus() to 0 in an int.
      {"num_nodes x gpus_per_node",
       [](ClusterSpec& c) {
         c.num_nodes = 1 << 16;
         c.gpus_per_node = 1 << 16;
       }},
      {"gemm_flops_per_second",
       [](ClusterSpec& c) { c.gemm_flops_per_second = 0; }},
      {"inter_node_bus_bytes_per_second",
       [](ClusterSpec& c) {
         c.inter_node_bus_bytes_per_second =
             std::numeric_limits<double>::infinity();
       }},
      {"intra_node_latency_seconds",
       [](ClusterSpec& c) { c.intra_node_latency_seconds = -1e-6; }},
  };
  for (const Case& c : cases) {
    ClusterSpec cluster = H200Cluster(2, 8);
    c.corrupt(cluster);
    absl::Status status = ValidateClusterSpec(cluster);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(status.message(), HasSubstr(c.field + " = "));
  }
}

TEST(ClusterSpecTest, JsonRoundTrip) {
  ClusterSpec cluster = H200Cluster(/*num_nodes=*/3, /*gpus_per_node=*/4);
  cluster.usable_memory_fraction = 0.7;
  cluster.gemm_flops_per_second = 612.5e12;
  cluster.inter_node_bus_bytes_per_second = 1.0 / 3.0 * 1e11;
  cluster.intra_node_latency_seconds = 17.25e-6;
  absl::StatusOr<ClusterSpec> parsed =
      ClusterSpecFromJson(ClusterSpecToJson(cluster));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameCluster(*parsed, cluster);
}

TEST(ClusterSpecTest, JsonFillsDefaultsAndRejectsBadFields) {
  absl::StatusOr<ClusterSpec> parsed =
      ClusterSpecFromJson(R"({"num_nodes": 2})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameCluster(*parsed, H200Cluster(2, 8));

  absl::StatusOr<ClusterSpec> bad =
      ClusterSpecFromJson(R"({"num_nodes": 2, "gpu_memory": 80e9})");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'gpu_memory'"));

  bad = ClusterSpecFromJson(R"({"gpus_per_node": "8"})");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'gpus_per_node'"));

  bad = ClusterSpecFromJson(R"({"hbm_bytes_per_second": "fast"})");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'hbm_bytes_per_second'"));

  bad = ClusterSpecFromJson(R"({"usable_memory_fraction": 0})");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("usable_memory_fraction"));

  EXPECT_FALSE(ClusterSpecFromJson("8 GPUs").ok());
}

}  // namespace
}  // namespace dcp
