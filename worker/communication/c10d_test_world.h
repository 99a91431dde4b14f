// The c10d world of one multiprocess_test_util RunRanks call, for tests
// whose rank mains run real Gloo collectives.

#ifndef DCP_WORKER_COMMUNICATION_C10D_TEST_WORLD_H_
#define DCP_WORKER_COMMUNICATION_C10D_TEST_WORLD_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/communication/communicator.h"
#include "worker/communication/multiprocess_test_util.h"

namespace dcp {
namespace testing {

/// Joins the world of this RunRanks call with CreateC10dCommunicator: rank 0
/// serves the store on a port the system picks and publishes it, the others
/// wait (up to `timeout`) for it. `store_prefix` keeps the keys of different
/// cases apart; `timeout` is also the communicator's; `max_cached_groups` is
/// C10dOptions'. Call from a rank main.
absl::StatusOr<std::unique_ptr<Communicator>> JoinC10dTestWorld(
    const RankContext& context, const std::string& store_prefix,
    absl::Duration timeout, int max_cached_groups = 0);

}  // namespace testing
}  // namespace dcp

#endif  // DCP_WORKER_COMMUNICATION_C10D_TEST_WORLD_H_
