#include "common/incarnation.h"

#include <cstdint>
#include <random>

#include "absl/strings/str_format.h"

namespace dcp {

std::string NewIncarnation() {
  std::random_device device;
  const uint64_t bits = (static_cast<uint64_t>(device()) << 32) ^ device();
  return absl::StrFormat("%016x", bits);
}

}  // namespace dcp
