#include "cost_model/comm_model.h"

namespace dcp {

CommParams DefaultCommParams(const ClusterSpec& cluster) {
  CommParams params;
  params.all_to_all_intra_latency_seconds = cluster.intra_node_latency_seconds;
  params.all_to_all_intra_bus_bytes_per_second =
      cluster.intra_node_bus_bytes_per_second;
  params.all_to_all_inter_latency_seconds = cluster.inter_node_latency_seconds;
  params.all_to_all_inter_bus_bytes_per_second =
      cluster.inter_node_bus_bytes_per_second;
  params.all_reduce_intra_latency_seconds = cluster.intra_node_latency_seconds;
  params.all_reduce_intra_bus_bytes_per_second =
      cluster.allreduce_intra_bus_bytes_per_second;
  params.all_reduce_inter_latency_seconds = cluster.inter_node_latency_seconds;
  params.all_reduce_inter_bus_bytes_per_second =
      cluster.inter_node_bus_bytes_per_second;
  return params;
}

double CommModel::AllToAllSeconds(double bytes_per_rank, int group_size,
                                  bool inter_node) const {
  if (group_size <= 1) return 0;
  const double bus_bytes = bytes_per_rank * (group_size - 1) / group_size;
  return inter_node ? params_.all_to_all_inter_latency_seconds +
                          bus_bytes /
                              params_.all_to_all_inter_bus_bytes_per_second
                    : params_.all_to_all_intra_latency_seconds +
                          bus_bytes /
                              params_.all_to_all_intra_bus_bytes_per_second;
}

double CommModel::AllReduceSeconds(double bytes, int group_size,
                                   bool inter_node) const {
  if (group_size <= 1) return 0;
  const double bus_bytes = 2.0 * bytes * (group_size - 1) / group_size;
  return inter_node ? params_.all_reduce_inter_latency_seconds +
                          bus_bytes /
                              params_.all_reduce_inter_bus_bytes_per_second
                    : params_.all_reduce_intra_latency_seconds +
                          bus_bytes /
                              params_.all_reduce_intra_bus_bytes_per_second;
}

}  // namespace dcp
