#ifndef DCP_COMMON_BYTE_FORMAT_H_
#define DCP_COMMON_BYTE_FORMAT_H_

#include <string>

namespace dcp {

/// A byte count for people, in binary units: "409.3 GiB" from 1 GiB up,
/// "12.5 MiB" from 1 MiB, "3.0 KiB" from 1 KiB (one decimal each) and
/// "512 B" below. A count that would round up to 1024 of a unit prints in
/// the next ("1.0 GiB", not "1024.0 MiB"). Negative counts print with a
/// minus sign in the unit of their magnitude; NaN and infinities print as
/// "nan B" and "inf B". Pure function.
std::string FormatBytes(double bytes);

}  // namespace dcp

#endif  // DCP_COMMON_BYTE_FORMAT_H_
