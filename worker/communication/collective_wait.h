// How a rank waits for one of its collectives, by backend.

#ifndef DCP_WORKER_COMMUNICATION_COLLECTIVE_WAIT_H_
#define DCP_WORKER_COMMUNICATION_COLLECTIVE_WAIT_H_

#include <chrono>

#include "absl/strings/string_view.h"

namespace dcp {

/// c10d's "no timeout" for Work::wait (kNoTimeout of c10d/Work.hpp).
inline constexpr std::chrono::milliseconds kWaitWithoutTimeout{0};

/// The timeout handed to c10d's Work::wait for a collective of `backend`
/// whose call allows `call_timeout`:
///  - gloo: `call_timeout`. The wait blocks the CPU until the collective is
///    done or the timeout passes.
///  - nccl: kWaitWithoutTimeout. Given a timeout, ProcessGroupNCCL's wait
///    polls the work's completion from the CPU, sleeping a millisecond
///    between polls, which would add up to a millisecond to every measured
///    collective (and a millisecond floor to the fitted all-to-all model).
///    Without one, the wait only orders the current CUDA stream after the
///    collective; whoever reads a clock synchronises the device first, and
///    NCCL's watchdog enforces the group's timeout (C10dOptions::timeout).
/// Pure; thread-safe.
inline std::chrono::milliseconds WorkWaitTimeout(
    absl::string_view backend, std::chrono::milliseconds call_timeout) {
  return backend == "nccl" ? kWaitWithoutTimeout : call_timeout;
}

}  // namespace dcp

#endif  // DCP_WORKER_COMMUNICATION_COLLECTIVE_WAIT_H_
