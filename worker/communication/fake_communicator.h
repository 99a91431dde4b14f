#ifndef DCP_WORKER_COMMUNICATION_FAKE_COMMUNICATOR_H_
#define DCP_WORKER_COMMUNICATION_FAKE_COMMUNICATOR_H_

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "torch/torch.h"
#include "worker/communication/communicator.h"
#include "worker/communication/single_rank_communicator.h"

namespace dcp {

/// The one-rank world, under the names the tests use.
using FakeCommGroup = SingleRankGroup;
using FakeCommunicator = SingleRankCommunicator;

/// A world of one rank (rank 0) whose world and every group is one
/// `GroupType` (a CommGroup of one member), for tests that script what the
/// collectives do. testonly. Not thread-safe.
template <typename GroupType>
class OneGroupCommunicator final : public Communicator {
 public:
  template <typename... Args>
  explicit OneGroupCommunicator(Args&&... args)
      : group(std::forward<Args>(args)...) {}

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  CommGroup& World() override { return group; }
  absl::StatusOr<CommGroup*> Group(const std::vector<int>&) override {
    return &group;
  }
  int groups_created() const override { return 1; }

  GroupType group;
};

}  // namespace dcp

#endif  // DCP_WORKER_COMMUNICATION_FAKE_COMMUNICATOR_H_
