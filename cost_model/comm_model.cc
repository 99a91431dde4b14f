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
  // NCCL's ring reduce-scatter and all-gather run at the links' bus
  // bandwidth, like the all-to-all (NVLS speeds up only the all-reduce).
  params.reduce_scatter_intra_latency_seconds =
      cluster.intra_node_latency_seconds;
  params.reduce_scatter_intra_bus_bytes_per_second =
      cluster.intra_node_bus_bytes_per_second;
  params.reduce_scatter_inter_latency_seconds =
      cluster.inter_node_latency_seconds;
  params.reduce_scatter_inter_bus_bytes_per_second =
      cluster.inter_node_bus_bytes_per_second;
  params.all_gather_intra_latency_seconds = cluster.intra_node_latency_seconds;
  params.all_gather_intra_bus_bytes_per_second =
      cluster.intra_node_bus_bytes_per_second;
  params.all_gather_inter_latency_seconds = cluster.inter_node_latency_seconds;
  params.all_gather_inter_bus_bytes_per_second =
      cluster.inter_node_bus_bytes_per_second;
  return params;
}

namespace {

// alpha + bytes (n-1)/n / bandwidth, 0 for a group of one.
double ShardedCollectiveSeconds(double bytes, int group_size,
                                double latency_seconds,
                                double bus_bytes_per_second) {
  if (group_size <= 1) return 0;
  return latency_seconds +
         bytes * (group_size - 1) / group_size / bus_bytes_per_second;
}

}  // namespace

double CommModel::AllToAllSeconds(double bytes_per_rank, int group_size,
                                  bool inter_node) const {
  return inter_node
             ? ShardedCollectiveSeconds(
                   bytes_per_rank, group_size,
                   params_.all_to_all_inter_latency_seconds,
                   params_.all_to_all_inter_bus_bytes_per_second)
             : ShardedCollectiveSeconds(
                   bytes_per_rank, group_size,
                   params_.all_to_all_intra_latency_seconds,
                   params_.all_to_all_intra_bus_bytes_per_second);
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

double CommModel::ReduceScatterSeconds(double bytes, int group_size,
                                       bool inter_node) const {
  return inter_node
             ? ShardedCollectiveSeconds(
                   bytes, group_size,
                   params_.reduce_scatter_inter_latency_seconds,
                   params_.reduce_scatter_inter_bus_bytes_per_second)
             : ShardedCollectiveSeconds(
                   bytes, group_size,
                   params_.reduce_scatter_intra_latency_seconds,
                   params_.reduce_scatter_intra_bus_bytes_per_second);
}

double CommModel::AllGatherSeconds(double bytes, int group_size,
                                   bool inter_node) const {
  return inter_node ? ShardedCollectiveSeconds(
                          bytes, group_size,
                          params_.all_gather_inter_latency_seconds,
                          params_.all_gather_inter_bus_bytes_per_second)
                    : ShardedCollectiveSeconds(
                          bytes, group_size,
                          params_.all_gather_intra_latency_seconds,
                          params_.all_gather_intra_bus_bytes_per_second);
}

}  // namespace dcp
