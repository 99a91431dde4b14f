#include "cost_model/cluster_spec.h"

#include <cmath>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/struct_json.h"
#include "nlohmann/json.hpp"

namespace dcp {

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
  for (const StructField<ClusterSpec>& field : kClusterSpecFields) {
    const auto* member = std::get_if<double ClusterSpec::*>(&field.member);
    if (member == nullptr) continue;
    const double value = spec.**member;
    if (!std::isfinite(value) || value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cluster: ", field.name, " = ", value, " must be a positive number"));
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
  absl::Status read = StructFromJson<ClusterSpec>(kClusterSpecFields, json,
                                                  "cluster spec", spec);
  if (!read.ok()) return read;
  absl::Status valid = ValidateClusterSpec(spec);
  if (!valid.ok()) return valid;
  return spec;
}

std::string ClusterSpecToJson(const ClusterSpec& spec) {
  return StructToJson<ClusterSpec>(kClusterSpecFields, spec).dump();
}

}  // namespace dcp
