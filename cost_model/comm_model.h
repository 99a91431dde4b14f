#ifndef DCP_COST_MODEL_COMM_MODEL_H_
#define DCP_COST_MODEL_COMM_MODEL_H_

#include "common/struct_fields.h"
#include "cost_model/cluster_spec.h"

namespace dcp {

/// Latency-bandwidth (alpha-beta) parameters of the collectives, separately
/// inside a node (NVLink) and across nodes (NICs).
struct CommParams {
  double all_to_all_intra_latency_seconds = 0;
  double all_to_all_intra_bus_bytes_per_second = 0;
  double all_to_all_inter_latency_seconds = 0;
  double all_to_all_inter_bus_bytes_per_second = 0;
  double all_reduce_intra_latency_seconds = 0;
  double all_reduce_intra_bus_bytes_per_second = 0;
  double all_reduce_inter_latency_seconds = 0;
  double all_reduce_inter_bus_bytes_per_second = 0;
  /// ZeRO-1's gradient reduce-scatter and weight all-gather.
  double reduce_scatter_intra_latency_seconds = 0;
  double reduce_scatter_intra_bus_bytes_per_second = 0;
  double reduce_scatter_inter_latency_seconds = 0;
  double reduce_scatter_inter_bus_bytes_per_second = 0;
  double all_gather_intra_latency_seconds = 0;
  double all_gather_intra_bus_bytes_per_second = 0;
  double all_gather_inter_latency_seconds = 0;
  double all_gather_inter_bus_bytes_per_second = 0;
};

/// Every member of CommParams by its name: the field of dcp.v1.CommParams that
/// carries it (common/struct_fields.h).
inline constexpr StructField<CommParams> kCommParamsFields[] = {
    {"all_to_all_intra_latency_seconds",
     &CommParams::all_to_all_intra_latency_seconds},
    {"all_to_all_intra_bus_bytes_per_second",
     &CommParams::all_to_all_intra_bus_bytes_per_second},
    {"all_to_all_inter_latency_seconds",
     &CommParams::all_to_all_inter_latency_seconds},
    {"all_to_all_inter_bus_bytes_per_second",
     &CommParams::all_to_all_inter_bus_bytes_per_second},
    {"all_reduce_intra_latency_seconds",
     &CommParams::all_reduce_intra_latency_seconds},
    {"all_reduce_intra_bus_bytes_per_second",
     &CommParams::all_reduce_intra_bus_bytes_per_second},
    {"all_reduce_inter_latency_seconds",
     &CommParams::all_reduce_inter_latency_seconds},
    {"all_reduce_inter_bus_bytes_per_second",
     &CommParams::all_reduce_inter_bus_bytes_per_second},
    {"reduce_scatter_intra_latency_seconds",
     &CommParams::reduce_scatter_intra_latency_seconds},
    {"reduce_scatter_intra_bus_bytes_per_second",
     &CommParams::reduce_scatter_intra_bus_bytes_per_second},
    {"reduce_scatter_inter_latency_seconds",
     &CommParams::reduce_scatter_inter_latency_seconds},
    {"reduce_scatter_inter_bus_bytes_per_second",
     &CommParams::reduce_scatter_inter_bus_bytes_per_second},
    {"all_gather_intra_latency_seconds",
     &CommParams::all_gather_intra_latency_seconds},
    {"all_gather_intra_bus_bytes_per_second",
     &CommParams::all_gather_intra_bus_bytes_per_second},
    {"all_gather_inter_latency_seconds",
     &CommParams::all_gather_inter_latency_seconds},
    {"all_gather_inter_bus_bytes_per_second",
     &CommParams::all_gather_inter_bus_bytes_per_second},
};

/// Where one collective's alpha-beta parameters on one kind of link live in
/// CommParams.
struct CommLinkFields {
  double CommParams::*latency_seconds;
  double CommParams::*bus_bytes_per_second;
};

/// One collective's parameters inside a node (intra) and across nodes
/// (inter).
struct CollectiveFields {
  /// The collective as its fields' names start: "all_to_all", ...
  const char* name;
  CommLinkFields intra;
  CommLinkFields inter;

  const CommLinkFields& On(bool inter_node) const {
    return inter_node ? inter : intra;
  }
};

inline constexpr CollectiveFields kAllToAllFields = {
    "all_to_all",
    {&CommParams::all_to_all_intra_latency_seconds,
     &CommParams::all_to_all_intra_bus_bytes_per_second},
    {&CommParams::all_to_all_inter_latency_seconds,
     &CommParams::all_to_all_inter_bus_bytes_per_second}};
inline constexpr CollectiveFields kAllReduceFields = {
    "all_reduce",
    {&CommParams::all_reduce_intra_latency_seconds,
     &CommParams::all_reduce_intra_bus_bytes_per_second},
    {&CommParams::all_reduce_inter_latency_seconds,
     &CommParams::all_reduce_inter_bus_bytes_per_second}};
inline constexpr CollectiveFields kReduceScatterFields = {
    "reduce_scatter",
    {&CommParams::reduce_scatter_intra_latency_seconds,
     &CommParams::reduce_scatter_intra_bus_bytes_per_second},
    {&CommParams::reduce_scatter_inter_latency_seconds,
     &CommParams::reduce_scatter_inter_bus_bytes_per_second}};
inline constexpr CollectiveFields kAllGatherFields = {
    "all_gather",
    {&CommParams::all_gather_intra_latency_seconds,
     &CommParams::all_gather_intra_bus_bytes_per_second},
    {&CommParams::all_gather_inter_latency_seconds,
     &CommParams::all_gather_inter_bus_bytes_per_second}};

/// Every collective of CommParams, in its order.
inline constexpr const CollectiveFields* kCollectiveFields[] = {
    &kAllToAllFields, &kAllReduceFields, &kReduceScatterFields,
    &kAllGatherFields};

/// From the cluster's public figures (predictions until profiled).
CommParams DefaultCommParams(const ClusterSpec& cluster);

/// Collective times: alpha + bus_bytes / bus_bandwidth, with NCCL's bus
/// factors ((n-1)/n for all-to-all, reduce-scatter and all-gather, 2(n-1)/n
/// for all-reduce). Immutable; thread-safe.
class CommModel {
 public:
  explicit CommModel(const CommParams& params) : params_(params) {}

  /// All-to-all where each of `group_size` ranks holds `bytes_per_rank`.
  double AllToAllSeconds(double bytes_per_rank, int group_size,
                         bool inter_node) const;
  /// All-reduce of `bytes` over `group_size` ranks.
  double AllReduceSeconds(double bytes, int group_size, bool inter_node) const;
  /// Reduce-scatter of a `bytes` buffer (each rank keeps the sum of its
  /// 1/group_size shard) over `group_size` ranks.
  double ReduceScatterSeconds(double bytes, int group_size,
                              bool inter_node) const;
  /// All-gather of shards into a `bytes` buffer on each of `group_size`
  /// ranks.
  double AllGatherSeconds(double bytes, int group_size, bool inter_node) const;

  const CommParams& params() const { return params_; }

 private:
  CommParams params_;
};

}  // namespace dcp

#endif  // DCP_COST_MODEL_COMM_MODEL_H_
