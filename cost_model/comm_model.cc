#include "cost_model/comm_model.h"

namespace dcp {

CommParams DefaultCommParams(const ClusterSpec& cluster) {
  CommParams params;
  for (const CollectiveFields* collective : kCollectiveFields) {
    params.*collective->intra.latency_seconds =
        cluster.intra_node_latency_seconds;
    params.*collective->intra.bus_bytes_per_second =
        cluster.intra_node_bus_bytes_per_second;
    params.*collective->inter.latency_seconds =
        cluster.inter_node_latency_seconds;
    params.*collective->inter.bus_bytes_per_second =
        cluster.inter_node_bus_bytes_per_second;
  }
  // NCCL's ring all-to-all, reduce-scatter and all-gather run at the links'
  // bus bandwidth; NVLS speeds up only the all-reduce inside a node.
  params.all_reduce_intra_bus_bytes_per_second =
      cluster.allreduce_intra_bus_bytes_per_second;
  return params;
}

namespace {

// alpha + bus_bytes / bandwidth of `collective` on the link `inter_node`
// picks.
double LinkSeconds(const CommParams& params, const CollectiveFields& collective,
                   bool inter_node, double bus_bytes) {
  const CommLinkFields& link = collective.On(inter_node);
  return params.*link.latency_seconds +
         bus_bytes / (params.*link.bus_bytes_per_second);
}

// alpha + bytes (n-1)/n / bandwidth, 0 for a group of one.
double ShardedCollectiveSeconds(const CommParams& params,
                                const CollectiveFields& collective,
                                double bytes, int group_size, bool inter_node) {
  if (group_size <= 1) return 0;
  return LinkSeconds(params, collective, inter_node,
                     bytes * (group_size - 1) / group_size);
}

}  // namespace

double CommModel::AllToAllSeconds(double bytes_per_rank, int group_size,
                                  bool inter_node) const {
  return ShardedCollectiveSeconds(params_, kAllToAllFields, bytes_per_rank,
                                  group_size, inter_node);
}

double CommModel::AllReduceSeconds(double bytes, int group_size,
                                   bool inter_node) const {
  if (group_size <= 1) return 0;
  return LinkSeconds(params_, kAllReduceFields, inter_node,
                     2.0 * bytes * (group_size - 1) / group_size);
}

double CommModel::ReduceScatterSeconds(double bytes, int group_size,
                                       bool inter_node) const {
  return ShardedCollectiveSeconds(params_, kReduceScatterFields, bytes,
                                  group_size, inter_node);
}

double CommModel::AllGatherSeconds(double bytes, int group_size,
                                   bool inter_node) const {
  return ShardedCollectiveSeconds(params_, kAllGatherFields, bytes, group_size,
                                  inter_node);
}

}  // namespace dcp
