#include "worker/communication/c10d_test_world.h"

#include <memory>
#include <string>

namespace dcp {
namespace testing {

absl::StatusOr<std::unique_ptr<Communicator>> JoinC10dTestWorld(
    const RankContext& context, const std::string& store_prefix,
    absl::Duration timeout, int max_cached_groups) {
  C10dOptions options;
  options.rank = context.rank;
  options.world_size = context.world_size;
  options.store_prefix = store_prefix;
  options.timeout = timeout;
  options.max_cached_groups = max_cached_groups;
  if (context.rank == 0) {
    options.on_store_listening = PublishStorePort;
  } else {
    absl::StatusOr<int> port = AwaitStorePort(timeout);
    if (!port.ok()) return port.status();
    options.store_port = *port;
  }
  return CreateC10dCommunicator(options);
}

}  // namespace testing
}  // namespace dcp
