#ifndef DCP_COST_MODEL_MODEL_CLUSTER_FLAGS_H_
#define DCP_COST_MODEL_MODEL_CLUSTER_FLAGS_H_

// The one definition of the model and cluster flags of DCP's binaries
// (`dcp`, `dcp_planner`, and for the worker helper to adopt: `dcp_worker`,
// `dcp_local_job`, the load test):
//
//   --model=PRESET|FILE     a preset (ModelPresetNames()) or ModelSpec JSON
//   --nodes=N               nodes of the cluster, in [1, 16384]
//   --gpus=N                (optional) GPUs instead of --nodes, whole nodes
//   --gpus-per-node=G       GPUs (ranks) per node, in [1, 64]
//   --memory-fraction=F     fraction of each GPU's memory plans may use
//   --cluster=FILE          (optional) ClusterSpec JSON over the H200 defaults
//
// Integers take K/M suffixes. Usage in a binary:
//
//   const ModelClusterFlags& ModelCluster() {
//     static const auto* const flags = new ModelClusterFlags(
//         {/*default_model=*/"tiny", /*default_nodes=*/"1",
//          /*default_gpus_per_node=*/"8", /*default_memory_fraction=*/"0.8",
//          /*gpus_flag=*/false, /*cluster_file_flag=*/true});
//     return *flags;
//   }
//   const std::vector<FlagSpec>& Table() {
//     static const auto* const table = new std::vector<FlagSpec>(
//         ConcatFlagTables({kOwnFlags, ModelCluster().specs()}));
//     return *table;
//   }
//   ...
//   DCP_ASSIGN_OR_RETURN(ModelSpec model, ModelCluster().Model(flags));
//   DCP_ASSIGN_OR_RETURN(ClusterSpec cluster, ModelCluster().Cluster(flags));

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/command_line.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/model_spec.h"

namespace dcp {

/// The model and cluster flags of one binary: which optional flags it
/// offers and the defaults, which differ by binary (the planner service
/// defaults to the tiny model, `dcp` to llama3-8b on 4 nodes). Immutable
/// after construction, so thread-safe; neither copyable nor movable (specs()
/// points into it), so keep one for the life of the program.
class ModelClusterFlags {
 public:
  /// An aggregate: give the fields in order, e.g. {"tiny", "1", "8", "0.8",
  /// /*gpus_flag=*/false, /*cluster_file_flag=*/true}.
  struct Options {
    const char* default_model = "llama3-8b";
    const char* default_nodes = "1";
    const char* default_gpus_per_node = "8";
    const char* default_memory_fraction = "0.8";
    /// Offer --gpus=N, exclusive with --nodes; N must be a multiple of
    /// --gpus-per-node.
    bool gpus_flag = false;
    /// Offer --cluster=FILE: a ClusterSpec JSON over the H200 defaults, which
    /// --nodes/--gpus, --gpus-per-node and --memory-fraction override only
    /// when given.
    bool cluster_file_flag = false;
  };

  explicit ModelClusterFlags(const Options& options);
  ModelClusterFlags(const ModelClusterFlags&) = delete;
  ModelClusterFlags& operator=(const ModelClusterFlags&) = delete;

  /// The flags, in the order of the file comment, to concatenate into the
  /// binary's table (ConcatFlagTables); valid while this object lives.
  absl::Span<const FlagSpec> specs() const { return specs_; }

  /// --model: the preset, or the ModelSpec JSON file it names (errors from
  /// LoadModelSpec, naming the value).
  absl::StatusOr<ModelSpec> Model(const ParsedFlags& flags) const;

  /// The cluster: H200Cluster(--nodes, --gpus-per-node) (or the --cluster
  /// file with the flags given over it), with --memory-fraction, checked by
  /// ValidateClusterSpec. INVALID_ARGUMENT naming the flag and its value,
  /// e.g. "--nodes=0: must be at least 1", "--gpus=30: is not a multiple of
  /// --gpus-per-node=8; use whole nodes, e.g. --gpus=32".
  absl::StatusOr<ClusterSpec> Cluster(const ParsedFlags& flags) const;

 private:
  const Options options_;
  /// Help of --model, listing the presets; specs_ points into it.
  const std::string model_help_;
  std::vector<FlagSpec> specs_;
};

}  // namespace dcp

#endif  // DCP_COST_MODEL_MODEL_CLUSTER_FLAGS_H_
