#include "cost_model/model_cluster_flags.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dcp {
namespace {

constexpr int64_t kMaxNodes = int64_t{1} << 14;
constexpr int64_t kMaxGpusPerNode = 64;
constexpr int64_t kMaxGpus = kMaxClusterGpus;

}  // namespace

ModelClusterFlags::ModelClusterFlags(const Options& options)
    : options_(options),
      model_help_(absl::StrCat("model preset (",
                               absl::StrJoin(ModelPresetNames(), ", "),
                               ") or a ModelSpec JSON file")) {
  specs_.push_back(
      {"model", "PRESET|FILE", options_.default_model, model_help_.c_str()});
  specs_.push_back(
      {"nodes", "N", options_.default_nodes, "nodes in the cluster"});
  if (options_.gpus_flag) {
    specs_.push_back({"gpus", "N", "",
                      "GPUs in the cluster, instead of --nodes; must be a "
                      "multiple of --gpus-per-node"});
  }
  specs_.push_back({"gpus-per-node", "G", options_.default_gpus_per_node,
                    "GPUs (ranks) per node"});
  specs_.push_back({"memory-fraction", "F", options_.default_memory_fraction,
                    "fraction of each GPU's memory plans may use, in (0, 1]"});
  if (options_.cluster_file_flag) {
    specs_.push_back(
        {"cluster", "FILE", "",
         "ClusterSpec JSON (cost_model/cluster_spec.h field names over the "
         "H200 defaults, e.g. a small CPU cluster); --nodes, --gpus-per-node "
         "and --memory-fraction override it when given"});
  }
}

absl::StatusOr<ModelSpec> ModelClusterFlags::Model(
    const ParsedFlags& flags) const {
  return LoadModelSpec(flags.String("model"));
}

absl::StatusOr<ClusterSpec> ModelClusterFlags::Cluster(
    const ParsedFlags& flags) const {
  absl::StatusOr<int64_t> nodes = flags.IntWithSuffix("nodes", 1, kMaxNodes);
  if (!nodes.ok()) return nodes.status();
  absl::StatusOr<int64_t> gpus_per_node =
      flags.IntWithSuffix("gpus-per-node", 1, kMaxGpusPerNode);
  if (!gpus_per_node.ok()) return gpus_per_node.status();
  const bool gpus_given = options_.gpus_flag && flags.Given("gpus");
  if (gpus_given) {
    const std::string text = flags.String("gpus");
    if (flags.Given("nodes")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus=", text,
                       ": cannot be combined with --nodes; give one of them"));
    }
    absl::StatusOr<int64_t> gpus = flags.IntWithSuffix("gpus", 1, kMaxGpus);
    if (!gpus.ok()) return gpus.status();
    if (*gpus % *gpus_per_node != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpus=", text, ": is not a multiple of --gpus-per-node=",
          *gpus_per_node, "; use whole nodes, e.g. --gpus=",
          (*gpus / *gpus_per_node + 1) * *gpus_per_node));
    }
    nodes = *gpus / *gpus_per_node;
  }
  ClusterSpec cluster =
      H200Cluster(static_cast<int>(*nodes), static_cast<int>(*gpus_per_node));
  const bool file_given = options_.cluster_file_flag && flags.Given("cluster");
  if (file_given) {
    absl::StatusOr<std::string> contents = flags.FileContents("cluster");
    if (!contents.ok()) return contents.status();
    absl::StatusOr<ClusterSpec> from_file = ClusterSpecFromJson(*contents);
    if (!from_file.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cluster=", flags.String("cluster"), ": ",
                       from_file.status().message()));
    }
    cluster = *from_file;
    if (flags.Given("nodes") || gpus_given) {
      cluster.num_nodes = static_cast<int>(*nodes);
    }
    if (flags.Given("gpus-per-node")) {
      cluster.gpus_per_node = static_cast<int>(*gpus_per_node);
    }
  }
  if (!file_given || flags.Given("memory-fraction")) {
    absl::StatusOr<double> fraction = flags.Double(
        "memory-fraction", /*min=*/0, /*max=*/1, /*min_exclusive=*/true);
    if (!fraction.ok()) return fraction.status();
    cluster.usable_memory_fraction = *fraction;
  }
  if (absl::Status valid = ValidateClusterSpec(cluster); !valid.ok()) {
    return valid;
  }
  return cluster;
}

}  // namespace dcp
