#ifndef DCP_PLANNER_SERVICE_REQUEST_VALIDATION_H_
#define DCP_PLANNER_SERVICE_REQUEST_VALIDATION_H_

// Validation of the planner's requests: pure functions, one per request, that
// check what can be checked without the handler's state. Errors are
// INVALID_ARGUMENT naming the field, the value and the fix.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dcp/v1/planner_service.pb.h"

namespace dcp {

/// Submitted batches that may wait to be planned at once (a memory bound).
inline constexpr size_t kMaxPendingBatches = 256;

/// The longest step (and micro-batch phase) time a report may give: a week.
/// A training step that takes longer is a broken clock or a hostile client,
/// and its time would swamp the step metrics and the online refit.
inline constexpr double kMaxStepSeconds = 7 * 24 * 3600.0;

/// A printable excerpt of a user-supplied string for an error message:
/// quoted, at most 64 characters, non-printable bytes as '?'.
std::string Quote(absl::string_view value);
/// 16 hex digits (how fingerprints appear in messages).
std::string Hex(uint64_t value);

/// `value` is 1..128 characters of letters, digits and . _ : -; `example`
/// says what to use instead ("the pod name").
absl::Status ValidateIdentifier(absl::string_view field,
                                absl::string_view value,
                                absl::string_view example);

/// A registration on a cluster of `gpus_per_node` GPUs per node.
absl::Status ValidateRegisterWorkerRequest(
    const v1::RegisterWorkerRequest& request, int gpus_per_node);

/// A profile's identity and size (its samples are checked by fitting them).
absl::Status ValidateSubmitProfileRequest(
    const v1::SubmitProfileRequest& request);

/// A batch as GetPlan and SubmitBatches need it; `field` names it in
/// messages ("batch", "batches[2]").
absl::Status ValidateGlobalBatch(const v1::GlobalBatch& batch,
                                 absl::string_view field);

/// A valid SubmitBatches request's batches by step.
struct SubmittedBatches {
  /// BatchFingerprint of each batch, in request order.
  std::vector<uint64_t> fingerprints;
  /// Each step's first batch in the request.
  std::map<int64_t, int> index_of_step;
};
absl::StatusOr<SubmittedBatches> ValidateSubmitBatchesRequest(
    const v1::SubmitBatchesRequest& request);

/// A GetPlan request that carries the batch's samples: its worker id and
/// that `step` and `batch_fingerprint` (when set) agree with the batch,
/// whose fingerprint is `fingerprint`. The samples themselves are checked
/// by ValidateGlobalBatch, only when the step is not planned yet.
absl::Status ValidateGetPlanWithBatch(const v1::GetPlanRequest& request,
                                      uint64_t fingerprint);

/// A GetPlan request by step (no samples).
absl::Status ValidateGetPlanByStep(const v1::GetPlanRequest& request);

/// A step report in a world of `world_size` ranks.
absl::Status ValidateReportStepStatsRequest(
    const v1::ReportStepStatsRequest& request, int world_size);

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_REQUEST_VALIDATION_H_
