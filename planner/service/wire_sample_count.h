#ifndef DCP_PLANNER_SERVICE_WIRE_SAMPLE_COUNT_H_
#define DCP_PLANNER_SERVICE_WIRE_SAMPLE_COUNT_H_

// How many samples a request's wire bytes carry, read without parsing them
// into messages: what the planner needs to know before it lets a large call
// take the memory that parsing it would (a parsed v1::Sample takes several
// times its wire bytes; kParsedBytesPerSample).

#include <cstdint>
#include <optional>

#include "dcp/v1/batch.pb.h"
#include "google/protobuf/io/zero_copy_stream.h"

namespace dcp {

/// The field of the top-level request holding GlobalBatch messages:
/// SubmitBatchesRequest.batches and GetPlanRequest.batch.
inline constexpr int kSubmitBatchesBatchField = 1;
inline constexpr int kGetPlanBatchField = 2;

/// About what one parsed v1::Sample takes in memory: the message, its
/// pointer in the repeated field and the allocator's header.
inline constexpr int64_t kParsedBytesPerSample =
    static_cast<int64_t>(sizeof(v1::Sample) + sizeof(void*) + 16);

/// The samples in every GlobalBatch at field `batch_field` of the message
/// read from `input` (to its end); nullopt when the bytes are not a
/// well-formed protobuf message.
std::optional<int64_t> CountWireSamples(
    google::protobuf::io::ZeroCopyInputStream& input, int batch_field);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_WIRE_SAMPLE_COUNT_H_
