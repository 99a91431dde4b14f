#include "worker/communication/sequence_parallel.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/autograd_saved_value.h"

namespace dcp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor RunAllToAll(const torch::Tensor& input,
                          const SequenceParallelContext& context) {
  torch::Tensor send = input.contiguous();
  torch::Tensor receive = torch::empty_like(send);
  if (context.wait_for_device) context.wait_for_device();
  const absl::Time start = context.clock->MonotonicNow();
  absl::Status status = context.group->AllToAll(send, receive, context.timeout);
  if (context.wait_for_device) context.wait_for_device();
  const absl::Time end = context.clock->MonotonicNow();
  if (context.stats != nullptr) {
    context.stats->all_to_all_time += end - start;
    context.stats->all_to_all_calls += 1;
    context.stats->all_to_all_bytes +=
        send.numel() * static_cast<int64_t>(send.element_size());
  }
  if (!status.ok()) throw CollectiveError(std::move(status));
  return receive;
}

class AllToAllFunction : public torch::autograd::Function<AllToAllFunction> {
 public:
  // Function::apply passes `context` through as is; SaveValue keeps the one
  // copy of it that backward uses.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const SequenceParallelContext& context) {
    torch::Tensor output = RunAllToAll(input, context);
    SaveValue(ctx, "context", context);
    return output;
  }

  static variable_list backward(AutogradContext* ctx,
                                variable_list grad_outputs) {
    // Gradients are materialized (zeros when unused), so every member always
    // takes part in this collective.
    return {RunAllToAll(grad_outputs[0],
                        SavedValue<SequenceParallelContext>(ctx, "context")),
            torch::Tensor()};
  }
};

}  // namespace

CollectiveError::CollectiveError(absl::Status status)
    : std::runtime_error(status.ToString()), status_(std::move(status)) {}

absl::Status StatusFromCurrentException(const char* what_failed) {
  try {
    throw;
  } catch (const CollectiveError& error) {
    return absl::Status(
        error.status().code(),
        absl::StrCat(what_failed, ": ", error.status().message()));
  } catch (const std::exception& error) {
    return absl::InternalError(absl::StrCat(what_failed, ": ", error.what()));
  } catch (...) {
    return absl::InternalError(
        absl::StrCat(what_failed, ": unknown exception"));
  }
}

torch::Tensor DifferentiableAllToAll(const torch::Tensor& input,
                                     const SequenceParallelContext& context) {
  if (context.size() == 1) return input;
  TORCH_CHECK(input.dim() >= 1 && input.size(0) == context.size(),
              "DifferentiableAllToAll: dim 0 of the input (",
              input.dim() >= 1 ? input.size(0) : 0,
              ") must equal the group size (", context.size(), ")");
  return AllToAllFunction::apply(input, context);
}

}  // namespace dcp
