#ifndef DCP_COST_MODEL_CLUSTER_SPEC_H_
#define DCP_COST_MODEL_CLUSTER_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/struct_fields.h"

namespace dcp {

/// A homogeneous GPU cluster: nodes x GPUs per node, with the figures the
/// cost model needs. Defaults are public H200 figures
/// (../shared/H200-FACTS.md), not measurements: anything derived from them
/// is a prediction.
struct ClusterSpec {
  int num_nodes = 1;
  int gpus_per_node = 8;
  /// HBM per GPU.
  double gpu_memory_bytes = 141e9;
  /// Fraction of HBM plans may use; the rest is headroom for NCCL buffers and
  /// fragmentation.
  double usable_memory_fraction = 0.8;
  /// Dense bf16 peak (vendor figure).
  double peak_flops_per_second = 989.4e12;
  /// Achieved on large bf16 GEMMs (public tables: ~790 TFLOP/s).
  double gemm_flops_per_second = 790e12;
  double hbm_bytes_per_second = 4.8e12;
  /// NCCL non-all-reduce collectives over NVLink (bus bandwidth).
  double intra_node_bus_bytes_per_second = 370e9;
  double intra_node_latency_seconds = 20e-6;
  /// Across nodes, per GPU (one 400 Gb/s NIC per GPU, ~48 GB/s achieved).
  double inter_node_bus_bytes_per_second = 48e9;
  double inter_node_latency_seconds = 30e-6;
  /// NVLS all-reduce bus bandwidth inside a node.
  double allreduce_intra_bus_bytes_per_second = 475e9;

  int NumGpus() const { return num_nodes * gpus_per_node; }
  /// What one GPU's plan may use.
  double MemoryBudgetBytes() const {
    return gpu_memory_bytes * usable_memory_fraction;
  }
};

/// Every member of ClusterSpec by its name: its key in JSON and the field of
/// dcp.v1.ClusterSpec that carries it (common/struct_fields.h).
inline constexpr StructField<ClusterSpec> kClusterSpecFields[] = {
    {"num_nodes", &ClusterSpec::num_nodes},
    {"gpus_per_node", &ClusterSpec::gpus_per_node},
    {"gpu_memory_bytes", &ClusterSpec::gpu_memory_bytes},
    {"usable_memory_fraction", &ClusterSpec::usable_memory_fraction},
    {"peak_flops_per_second", &ClusterSpec::peak_flops_per_second},
    {"gemm_flops_per_second", &ClusterSpec::gemm_flops_per_second},
    {"hbm_bytes_per_second", &ClusterSpec::hbm_bytes_per_second},
    {"intra_node_bus_bytes_per_second",
     &ClusterSpec::intra_node_bus_bytes_per_second},
    {"intra_node_latency_seconds", &ClusterSpec::intra_node_latency_seconds},
    {"inter_node_bus_bytes_per_second",
     &ClusterSpec::inter_node_bus_bytes_per_second},
    {"inter_node_latency_seconds", &ClusterSpec::inter_node_latency_seconds},
    {"allreduce_intra_bus_bytes_per_second",
     &ClusterSpec::allreduce_intra_bus_bytes_per_second},
};

/// The most GPUs a cluster may have (2^20): num_nodes x gpus_per_node stays
/// far inside an int, and so do ranks.
inline constexpr int64_t kMaxClusterGpus = int64_t{1} << 20;

/// H200 defaults with the given shape.
ClusterSpec H200Cluster(int num_nodes, int gpus_per_node);

/// Checks every field; the error names the field, its value and the fix.
absl::Status ValidateClusterSpec(const ClusterSpec& spec);

/// Parses a JSON object with ClusterSpec field names over the H200 defaults.
absl::StatusOr<ClusterSpec> ClusterSpecFromJson(absl::string_view json_text);

std::string ClusterSpecToJson(const ClusterSpec& spec);

}  // namespace dcp

#endif  // DCP_COST_MODEL_CLUSTER_SPEC_H_
