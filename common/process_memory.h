#ifndef DCP_COMMON_PROCESS_MEMORY_H_
#define DCP_COMMON_PROCESS_MEMORY_H_

// A process's resident memory as Linux reports it in /proc/PID/status: the
// measure the planner's --memory-budget is held to (a pod's memory limit
// counts resident pages).

#include <cstdint>

#include "absl/status/statusor.h"

namespace dcp {

/// Resident bytes of process `pid` now (VmRSS) and at most since it started
/// (VmHWM, the kernel's high-water mark).
struct ProcessMemory {
  int64_t resident_bytes = 0;
  int64_t peak_resident_bytes = 0;
};

/// Reads /proc/`pid`/status; NOT_FOUND when the process is gone,
/// FAILED_PRECONDITION when the file lacks VmRSS or VmHWM.
absl::StatusOr<ProcessMemory> ReadProcessMemory(int pid);

}  // namespace dcp

#endif  // DCP_COMMON_PROCESS_MEMORY_H_
