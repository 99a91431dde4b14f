// A process's incarnation: a random name, new at every start, that tells a
// restarted process (or a second copy) apart from the one before it under
// the same stable id.

#ifndef DCP_COMMON_INCARNATION_H_
#define DCP_COMMON_INCARNATION_H_

#include <string>

namespace dcp {

/// 16 lowercase hex digits from the system's random device (64 random
/// bits; two processes share one with probability ~2^-64). Thread-safe.
std::string NewIncarnation();

}  // namespace dcp

#endif  // DCP_COMMON_INCARNATION_H_
