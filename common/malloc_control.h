#ifndef DCP_COMMON_MALLOC_CONTROL_H_
#define DCP_COMMON_MALLOC_CONTROL_H_

// Keeping a long-lived process's resident memory near what it holds: glibc's
// malloc keeps freed memory in per-thread arenas and returns little of it to
// the kernel, so a service whose threads each parse or plan a large batch in
// turn grows by an arena's worth per thread. Measured on dcp_planner under
// planner_flood (7 x 1M-sample batches, --memory-budget=768Mi): peak
// resident 925 MiB with glibc's defaults, 527 MiB with 2 arenas, and 224
// MiB instead of 592 MiB resident after planning when freed memory is
// returned after each plan. Both are no-ops where malloc is not glibc's.

#include <cstdint>

namespace dcp {

/// Caps the malloc arenas that threads share (mallopt M_ARENA_MAX); call
/// once at start-up, before threads start.
void LimitMallocArenas(int arenas);

/// Returns freed heap memory to the kernel (malloc_trim); takes about a
/// millisecond per 100 MiB of heap, so call it after large work only: work
/// that freed at least kReleaseFreedMemoryAfterBytes.
void ReleaseFreedMemory();
inline constexpr int64_t kReleaseFreedMemoryAfterBytes = int64_t{16} << 20;

}  // namespace dcp

#endif  // DCP_COMMON_MALLOC_CONTROL_H_
