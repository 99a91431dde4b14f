#ifndef DCP_WORKER_COMMUNICATION_COMMUNICATOR_H_
#define DCP_WORKER_COMMUNICATION_COMMUNICATOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cost_model/memory_model.h"
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

  /// Sum over the members, scattered: `input` is size() equal chunks along
  /// dim 0; `output` (contiguous, the shape of one chunk) receives the sum
  /// over the members of chunk rank(). UNIMPLEMENTED unless overridden.
  virtual absl::Status ReduceScatterSum(const torch::Tensor& /*input*/,
                                        torch::Tensor& /*output*/,
                                        absl::Duration /*timeout*/) {
    return absl::UnimplementedError(
        "ReduceScatterSum is not supported by this CommGroup");
  }
  /// Gathers every member's `input` into `output` (contiguous, size() times
  /// the input's dim 0): chunk j of the output is member j's input.
  /// UNIMPLEMENTED unless overridden.
  virtual absl::Status AllGather(const torch::Tensor& /*input*/,
                                 torch::Tensor& /*output*/,
                                 absl::Duration /*timeout*/) {
    return absl::UnimplementedError(
        "AllGather is not supported by this CommGroup");
  }
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
  /// Number of groups created so far (the world included; a group evicted
  /// by UseGroups and created again counts twice).
  virtual int groups_created() const = 0;
  /// Groups this rank holds now (the world included): each is a
  /// communicator that costs memory (an NCCL one ~0.6 GB of GPU memory).
  virtual int groups_held() const { return groups_created(); }

  /// Announces the groups one step uses (all of them, every rank's, each
  /// ascending; every rank passes the same list at the same point, before
  /// calling Group for any of them). A communicator with a bound on cached
  /// groups (C10dOptions::max_cached_groups) then releases the least
  /// recently used sub-groups that the step does not use, so that no rank
  /// holds more than the bound; every rank decides from the same history, so
  /// all members of a group release it alike and create it again alike.
  /// Without a bound, nothing to do.
  virtual absl::Status UseGroups(
      const std::vector<std::vector<int>>& /*groups_of_step*/) {
    return absl::OkStatus();
  }
};

struct C10dOptions {
  /// Rank 0 hosts the TCPStore here; the others connect to it.
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  int rank = 0;
  int world_size = 1;
  /// "gloo" (CPU) or "nccl" (GPU; needs a CUDA LibTorch and a GPU).
  std::string backend = "gloo";
  /// This rank's device (placement.h): with nccl, its GPU, which must be
  /// the current CUDA device (UseDevice) before the communicator is made;
  /// every NCCL group is bound to it and connected when it is created, so
  /// that no collective's timing includes making a communicator.
  torch::Device device = torch::kCPU;
  /// Default timeout of store operations and collectives.
  absl::Duration timeout = absl::Seconds(60);
  /// Namespace of this job's keys in the store (distinct per job/attempt).
  std::string store_prefix = "dcp";
  /// The most sub-groups (the world not counted) a rank keeps cached; 0:
  /// no bound. Enforced through Communicator::UseGroups, so that cached
  /// communicators never take more memory than the memory model counts for
  /// them (1 + max_cached_groups per rank).
  int max_cached_groups = 0;
  /// Rank 0 only: called once the store listens and before rank 0 waits for
  /// the others to join, with the bound port (the one the system chose when
  /// store_port is 0). Publish the port from here so the other ranks can
  /// connect; an error aborts CreateC10dCommunicator and is returned.
  std::function<absl::Status(int port)> on_store_listening;
};

/// The group cache bound a worker on `backend` uses for a requested one:
/// `requested` when it is >= 0; otherwise (no bound asked for) the NCCL
/// default kDefaultNcclMaxCachedGroups, since every cached NCCL group holds
/// ~0.6 GB of GPU memory, and 0 (unbounded) on Gloo, whose groups cost no
/// GPU memory.
inline int MaxCachedGroupsFor(const std::string& backend, int requested) {
  if (requested >= 0) return requested;
  return backend == "nccl" ? kDefaultNcclMaxCachedGroups : 0;
}

/// Joins the world through PyTorch's c10d: TCPStore (server on rank 0),
/// ProcessGroupGloo or ProcessGroupNCCL, sub-groups over PrefixStores.
/// Errors: UNAVAILABLE when the store cannot be reached in time,
/// UNIMPLEMENTED for "nccl" without CUDA, INVALID_ARGUMENT for bad options.
absl::StatusOr<std::unique_ptr<Communicator>> CreateC10dCommunicator(
    const C10dOptions& options);

}  // namespace dcp

#endif  // DCP_WORKER_COMMUNICATION_COMMUNICATOR_H_
