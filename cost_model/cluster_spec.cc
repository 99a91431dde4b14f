#include "cost_model/cluster_spec.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace dcp {
namespace {

// The double-valued fields, by JSON name, for parsing and printing.
std::vector<std::pair<const char*, double ClusterSpec::*>> DoubleFields() {
  return {
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
}

}  // namespace

ClusterSpec H200Cluster(int num_nodes, int gpus_per_node) {
  ClusterSpec spec;
  spec.num_nodes = num_nodes;
  spec.gpus_per_node = gpus_per_node;
  return spec;
}

absl::Status ValidateClusterSpec(const ClusterSpec& spec) {
  if (spec.num_nodes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster: num_nodes = ", spec.num_nodes, " must be at least 1"));
  }
  if (spec.gpus_per_node <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster: gpus_per_node = ", spec.gpus_per_node,
        " must be at least 1"));
  }
  if (int64_t{spec.num_nodes} * spec.gpus_per_node > kMaxClusterGpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster: num_nodes x gpus_per_node = ", spec.num_nodes, " x ",
        spec.gpus_per_node, " GPUs; at most ", kMaxClusterGpus,
        " (2^20) are supported"));
  }
  if (!(spec.usable_memory_fraction > 0 && spec.usable_memory_fraction <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster: usable_memory_fraction = ", spec.usable_memory_fraction,
        " must be in (0, 1]"));
  }
  for (const auto& [name, field] : DoubleFields()) {
    const double value = spec.*field;
    if (!std::isfinite(value) || value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cluster: ", name, " = ", value, " must be a positive number"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterSpec> ClusterSpecFromJson(absl::string_view json_text) {
  nlohmann::json json =
      nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr,
                            /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError("cluster spec is not a JSON object");
  }
  ClusterSpec spec;
  const auto fields = DoubleFields();
  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string& key = it.key();
    if (key == "num_nodes" || key == "gpus_per_node") {
      if (!it.value().is_number_integer() ||
          it.value().get<int64_t>() < -(int64_t{1} << 31) ||
          it.value().get<int64_t>() >= (int64_t{1} << 31)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cluster spec field '", key, "' = ", it.value().dump(),
            " must be an integer below 2^31"));
      }
      (key == "num_nodes" ? spec.num_nodes : spec.gpus_per_node) =
          it.value().get<int>();
      continue;
    }
    bool known = false;
    for (const auto& [name, field] : fields) {
      if (key != name) continue;
      known = true;
      if (!it.value().is_number()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cluster spec field '", key, "' = ",
                         it.value().dump(), " must be a number"));
      }
      spec.*field = it.value().get<double>();
    }
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown cluster spec field '", key, "'"));
    }
  }
  absl::Status valid = ValidateClusterSpec(spec);
  if (!valid.ok()) return valid;
  return spec;
}

std::string ClusterSpecToJson(const ClusterSpec& spec) {
  nlohmann::json json = {{"num_nodes", spec.num_nodes},
                         {"gpus_per_node", spec.gpus_per_node}};
  for (const auto& [name, field] : DoubleFields()) json[name] = spec.*field;
  return json.dump();
}

}  // namespace dcp
