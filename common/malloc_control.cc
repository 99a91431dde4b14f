#include "common/malloc_control.h"

#include <cstdlib>  // defines __GLIBC__ where the C library is glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dcp {

void LimitMallocArenas(int arenas) {
#if defined(__GLIBC__)
  mallopt(M_ARENA_MAX, arenas);
#else
  (void)arenas;
#endif
}

void ReleaseFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace dcp
