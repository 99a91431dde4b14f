#ifndef DCP_WORKER_COMMUNICATION_COMMUNICATOR_H_
#define DCP_WORKER_COMMUNICATION_COMMUNICATOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "torch/torch.h"

namespace dcp {

/// Collectives over a fixed set of ranks (a c10d process group over a
/// subset of the world). Calls block until done or `timeout` passes, then
/// fail with DEADLINE_EXCEEDED (never hang silently); an unsupported
/// operation fails with UNIMPLEMENTED. Not thread-safe: one caller issues a
/// group's collectives in order, and every member issues the same sequence.
class CommGroup {
 public:
  virtual ~CommGroup() = default;

  /// This process's index within the group.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Global ranks of the members, ascending; rank() indexes this.
  virtual const std::vector<int>& global_ranks() const = 0;

  /// Equal-split all-to-all along dim 0: `input` is size() chunks, chunk i
  /// goes to member i; `output` (same shape, contiguous) receives chunk j
  /// from member j at position j.
  virtual absl::Status AllToAll(const torch::Tensor& input,
                                torch::Tensor& output,
                                absl::Duration timeout) = 0;
  /// In-place sum over the members.
  virtual absl::Status AllReduceSum(torch::Tensor& tensor,
                                    absl::Duration timeout) = 0;
  virtual absl::Status Barrier(absl::Duration timeout) = 0;
};

/// The world of one job plus its sub-groups. Sub-groups are created on first
/// use and cached by their member ranks, so switching groups between steps
/// costs nothing after the first time; a rank never takes part in (or waits
/// on) a group it is not in. Creating a group is itself collective among its
/// members. Not thread-safe.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual CommGroup& World() = 0;
  /// The group of exactly `ranks` (ascending, containing rank()).
  /// INVALID_ARGUMENT otherwise.
  virtual absl::StatusOr<CommGroup*> Group(const std::vector<int>& ranks) = 0;
  /// Number of distinct groups created so far (the world included).
  virtual int groups_created() const = 0;
};

struct C10dOptions {
  /// Rank 0 hosts the TCPStore here; the others connect to it.
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  int rank = 0;
  int world_size = 1;
  /// "gloo" (CPU) or "nccl" (GPU; needs a CUDA LibTorch and a GPU).
  std::string backend = "gloo";
  /// Default timeout of store operations and collectives.
  absl::Duration timeout = absl::Seconds(60);
  /// Namespace of this job's keys in the store (distinct per job/attempt).
  std::string store_prefix = "dcp";
  /// Rank 0 only: called once the store listens and before rank 0 waits for
  /// the others to join, with the bound port (the one the system chose when
  /// store_port is 0). Publish the port from here so the other ranks can
  /// connect; an error aborts CreateC10dCommunicator and is returned.
  std::function<absl::Status(int port)> on_store_listening;
};

/// Joins the world through PyTorch's c10d: TCPStore (server on rank 0),
/// ProcessGroupGloo or ProcessGroupNCCL, sub-groups over PrefixStores.
/// Errors: UNAVAILABLE when the store cannot be reached in time,
/// UNIMPLEMENTED for "nccl" without CUDA, INVALID_ARGUMENT for bad options.
absl::StatusOr<std::unique_ptr<Communicator>> CreateC10dCommunicator(
    const C10dOptions& options);

}  // namespace dcp

#endif  // DCP_WORKER_COMMUNICATION_COMMUNICATOR_H_
