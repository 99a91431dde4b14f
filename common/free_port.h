#ifndef DCP_COMMON_FREE_PORT_H_
#define DCP_COMMON_FREE_PORT_H_

#include <string>

#include "absl/status/statusor.h"

namespace dcp {

/// A TCP port on `host` (a name or address of this machine) that was free a
/// moment ago: binds port 0 on the first address of `host` that accepts it,
/// reads the port the kernel chose and closes the socket. Another process may
/// take it before the caller binds it, so servers should bind port 0
/// themselves where they can. UNAVAILABLE naming `host` if it does not
/// resolve or no address of it can be bound. Thread-safe.
absl::StatusOr<int> PickFreePort(const std::string& host);

}  // namespace dcp

#endif  // DCP_COMMON_FREE_PORT_H_
