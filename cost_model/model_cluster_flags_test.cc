#include "cost_model/model_cluster_flags.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/command_line.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

ModelClusterFlags::Options Offering(bool gpus_flag, bool cluster_file_flag) {
  ModelClusterFlags::Options options;
  options.gpus_flag = gpus_flag;
  options.cluster_file_flag = cluster_file_flag;
  return options;
}

// Parses `arguments` against `flags`' table.
absl::StatusOr<ParsedFlags> Parse(const ModelClusterFlags& flags,
                                  std::vector<const char*> arguments) {
  arguments.insert(arguments.begin(), "program");
  return ParseFlags(static_cast<int>(arguments.size()), arguments.data(),
                    flags.specs(), {RepeatedFlags::kError});
}

std::vector<std::string> Names(const ModelClusterFlags& flags) {
  std::vector<std::string> names;
  for (const FlagSpec& spec : flags.specs()) names.push_back(spec.name);
  return names;
}

TEST(ModelClusterFlagsTest, OffersTheOptionalFlagsOnlyWhenAsked) {
  const ModelClusterFlags plain({});
  EXPECT_EQ(Names(plain),
            std::vector<std::string>(
                {"model", "nodes", "gpus-per-node", "memory-fraction"}));
  const ModelClusterFlags all(
      Offering(/*gpus_flag=*/true, /*cluster_file_flag=*/true));
  EXPECT_EQ(Names(all),
            std::vector<std::string>({"model", "nodes", "gpus", "gpus-per-node",
                                      "memory-fraction", "cluster"}));
  // --model's help lists the presets.
  EXPECT_THAT(std::string(all.specs()[0].help), HasSubstr("llama3-8b"));
  EXPECT_THAT(std::string(all.specs()[0].help), HasSubstr("tiny"));
}

TEST(ModelClusterFlagsTest, DefaultsPerBinary) {
  ModelClusterFlags::Options options;
  options.default_model = "tiny";
  options.default_nodes = "4";
  options.default_gpus_per_node = "2";
  options.default_memory_fraction = "0.5";
  const ModelClusterFlags flags(options);
  absl::StatusOr<ParsedFlags> parsed = Parse(flags, {});
  ASSERT_TRUE(parsed.ok());
  absl::StatusOr<ModelSpec> model = flags.Model(*parsed);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<ClusterSpec> cluster = flags.Cluster(*parsed);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(cluster->num_nodes, 4);
  EXPECT_EQ(cluster->gpus_per_node, 2);
  EXPECT_DOUBLE_EQ(cluster->usable_memory_fraction, 0.5);
  EXPECT_DOUBLE_EQ(cluster->gpu_memory_bytes,
                   H200Cluster(4, 2).gpu_memory_bytes);
}

TEST(ModelClusterFlagsTest, GpusAreWholeNodesAndExclusiveWithNodes) {
  const ModelClusterFlags flags(
      Offering(/*gpus_flag=*/true, /*cluster_file_flag=*/false));
  absl::StatusOr<ClusterSpec> cluster =
      flags.Cluster(*Parse(flags, {"--gpus=32", "--gpus-per-node=4"}));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(cluster->num_nodes, 8);
  EXPECT_EQ(cluster->gpus_per_node, 4);
  EXPECT_EQ(flags.Cluster(*Parse(flags, {"--gpus=1K"}))->num_nodes, 128);

  EXPECT_EQ(flags.Cluster(*Parse(flags, {"--gpus=30"})).status().message(),
            "--gpus=30: is not a multiple of --gpus-per-node=8; use whole "
            "nodes, e.g. --gpus=32");
  EXPECT_EQ(flags.Cluster(*Parse(flags, {"--gpus=16", "--nodes=2"}))
                .status()
                .message(),
            "--gpus=16: cannot be combined with --nodes; give one of them");
}

TEST(ModelClusterFlagsTest, BadValuesNameTheFlag) {
  const ModelClusterFlags flags(
      Offering(/*gpus_flag=*/true, /*cluster_file_flag=*/false));
  struct Case {
    const char* argument;
    const char* message;
  };
  for (const Case& c : {
           Case{"--nodes=0", "--nodes=0: must be at least 1"},
           Case{"--nodes=abc", "--nodes=abc: is not an integer"},
           Case{"--nodes=32K", "--nodes=32K: must be at most 16384"},
           Case{"--gpus-per-node=-8", "--gpus-per-node=-8: must be at least 1"},
           Case{"--gpus-per-node=65", "--gpus-per-node=65: must be at most 64"},
           Case{"--memory-fraction=1.5",
                "--memory-fraction=1.5: expected a number in (0, 1]"},
           Case{"--memory-fraction=0",
                "--memory-fraction=0: expected a number in (0, 1]"},
       }) {
    absl::StatusOr<ClusterSpec> cluster =
        flags.Cluster(*Parse(flags, {c.argument}));
    EXPECT_EQ(cluster.status().code(), absl::StatusCode::kInvalidArgument)
        << c.argument;
    EXPECT_THAT(std::string(cluster.status().message()), HasSubstr(c.message));
  }
  absl::StatusOr<ModelSpec> model =
      flags.Model(*Parse(flags, {"--model=no-such-model"}));
  EXPECT_FALSE(model.ok());
  EXPECT_THAT(std::string(model.status().message()),
              HasSubstr("no-such-model"));
}

std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path = TestTempPath("model_cluster_" + name);
  WriteTestFile(path, text);
  return path;
}

TEST(ModelClusterFlagsTest, ClusterFileWithFlagsGivenOverIt) {
  const ModelClusterFlags flags(
      Offering(/*gpus_flag=*/false, /*cluster_file_flag=*/true));
  const std::string path = WriteTempFile(
      "cpu.json",
      R"({"num_nodes": 2, "gpus_per_node": 4, "gpu_memory_bytes": 8e9,
          "usable_memory_fraction": 0.5})");
  const std::string cluster_flag = "--cluster=" + path;
  // The file alone: its own memory fraction, not the flag's default.
  absl::StatusOr<ClusterSpec> cluster =
      flags.Cluster(*Parse(flags, {cluster_flag.c_str()}));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(cluster->num_nodes, 2);
  EXPECT_EQ(cluster->gpus_per_node, 4);
  EXPECT_DOUBLE_EQ(cluster->gpu_memory_bytes, 8e9);
  EXPECT_DOUBLE_EQ(cluster->usable_memory_fraction, 0.5);
  // Flags given override the file.
  cluster = flags.Cluster(*Parse(
      flags, {cluster_flag.c_str(), "--nodes=3", "--memory-fraction=0.9"}));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(cluster->num_nodes, 3);
  EXPECT_EQ(cluster->gpus_per_node, 4);
  EXPECT_DOUBLE_EQ(cluster->usable_memory_fraction, 0.9);

  EXPECT_THAT(std::string(flags.Cluster(*Parse(flags, {"--cluster=/no/such"}))
                              .status()
                              .message()),
              HasSubstr("--cluster=/no/such: cannot read the file"));
  const std::string bad = "--cluster=" + WriteTempFile("bad.json", "{");
  EXPECT_THAT(
      std::string(
          flags.Cluster(*Parse(flags, {bad.c_str()})).status().message()),
      HasSubstr(bad));
}

}  // namespace
}  // namespace dcp
