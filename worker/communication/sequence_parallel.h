#ifndef DCP_WORKER_COMMUNICATION_SEQUENCE_PARALLEL_H_
#define DCP_WORKER_COMMUNICATION_SEQUENCE_PARALLEL_H_

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "torch/torch.h"
#include "worker/communication/communicator.h"

namespace dcp {

/// Communication done by the differentiable all-to-alls of one micro-batch:
/// forward, backward and recompute calls alike. Not thread-safe (the CPU
/// autograd engine runs a graph's backward on the calling thread).
struct CommunicationStats {
  /// Wall time spent inside CommGroup::AllToAll, measured with the injected
  /// Clock around each call.
  absl::Duration all_to_all_time = absl::ZeroDuration();
  int64_t all_to_all_calls = 0;
  /// Bytes this rank handed to AllToAll (its whole input, own chunk included).
  int64_t all_to_all_bytes = 0;
};

/// What the Ulysses layers of one forward pass need to reach their
/// sequence-parallel group. `group` and `clock` must outlive every autograd
/// graph built with this context (its backward and recompute use them);
/// `stats` is shared by the graph and may be null. Plain value.
struct SequenceParallelContext {
  /// The SP group; null means a group of one (no communication).
  CommGroup* group = nullptr;
  absl::Duration timeout = absl::Seconds(60);
  const Clock* clock = &RealClock::Get();
  std::shared_ptr<CommunicationStats> stats;
  /// Waits until the device has run everything queued on it; called right
  /// before each clock read around an all-to-all, so that the time counted
  /// as communication holds the exchange alone, not the kernels queued
  /// before it (on a GPU, work is asynchronous) nor less than the exchange.
  /// Empty on the CPU, where work is done when a call returns.
  std::function<void()> wait_for_device;

  int size() const { return group == nullptr ? 1 : group->size(); }
  int rank() const { return group == nullptr ? 0 : group->rank(); }
};

/// A collective failed inside an autograd graph (forward, backward or
/// recompute), where no Status can be returned. Carries the collective's
/// Status; StatusFromCurrentException() turns it back into one.
class CollectiveError : public std::runtime_error {
 public:
  explicit CollectiveError(absl::Status status);
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

/// Call inside `catch (...)`: the Status of a CollectiveError, or INTERNAL
/// with the message of any other exception (a LibTorch check, say),
/// prefixed by `what_failed`.
absl::Status StatusFromCurrentException(const char* what_failed);

/// Differentiable equal-split all-to-all along dim 0 over `context.group`:
/// `input` is size() chunks along dim 0, chunk i goes to member i, and chunk j
/// of the result came from member j. Its backward is the same all-to-all of
/// the incoming gradient over the same group (the exchange is its own
/// inverse). With a group of one it returns `input` unchanged without
/// communicating. Throws CollectiveError when the collective fails.
torch::Tensor DifferentiableAllToAll(const torch::Tensor& input,
                                     const SequenceParallelContext& context);

}  // namespace dcp

#endif  // DCP_WORKER_COMMUNICATION_SEQUENCE_PARALLEL_H_
