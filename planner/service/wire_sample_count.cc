#include "planner/service/wire_sample_count.h"

#include <limits>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace dcp {
namespace {

using ::google::protobuf::io::CodedInputStream;
using ::google::protobuf::internal::WireFormatLite;

/// GlobalBatch.samples.
constexpr int kSamplesField = 2;

bool IsLengthDelimited(uint32_t tag, int field) {
  return WireFormatLite::GetTagFieldNumber(tag) == field &&
         WireFormatLite::GetTagWireType(tag) ==
             WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
}

/// Counts the samples of one GlobalBatch of `length` bytes at `in`.
bool CountBatch(CodedInputStream& in, uint32_t length, int64_t& count) {
  const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
  while (const uint32_t tag = in.ReadTag()) {
    if (IsLengthDelimited(tag, kSamplesField)) {
      uint32_t sample_length = 0;
      if (!in.ReadVarint32(&sample_length) ||
          !in.Skip(static_cast<int>(sample_length))) {
        return false;
      }
      ++count;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
  }
  if (!in.ConsumedEntireMessage()) return false;
  in.PopLimit(limit);
  return true;
}

}  // namespace

std::optional<int64_t> CountWireSamples(
    google::protobuf::io::ZeroCopyInputStream& input, int batch_field) {
  CodedInputStream in(&input);
  in.SetTotalBytesLimit(std::numeric_limits<int>::max());
  int64_t count = 0;
  while (const uint32_t tag = in.ReadTag()) {
    if (IsLengthDelimited(tag, batch_field)) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length) ||
          length > static_cast<uint32_t>(std::numeric_limits<int>::max()) ||
          !CountBatch(in, length, count)) {
        return std::nullopt;
      }
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return std::nullopt;
    }
  }
  if (!in.ConsumedEntireMessage()) return std::nullopt;
  return count;
}

}  // namespace dcp
