#ifndef DCP_WORKER_AUTOGRAD_SAVED_VALUE_H_
#define DCP_WORKER_AUTOGRAD_SAVED_VALUE_H_

// Carrying a plain C++ value (a layer function, a communicator context)
// from a custom autograd Function's forward to its backward. The context's
// saved data holds only IValues, so the value rides in a capsule.

#include <string>
#include <utility>

#include "torch/torch.h"

namespace dcp {

/// A value of type `T` in a form Function::apply accepts as a
/// non-differentiable argument, and saved data can hold. Immutable once
/// made; thread-compatible.
template <typename T>
struct AutogradValue : torch::CustomClassHolder {
  explicit AutogradValue(T v) : value(std::move(v)) {}
  const T value;
};

/// Wraps `value` for Function::apply; forward receives it as
/// `c10::intrusive_ptr<AutogradValue<T>>` and keeps it with SaveValue.
template <typename T>
c10::intrusive_ptr<AutogradValue<T>> MakeAutogradValue(T value) {
  return c10::make_intrusive<AutogradValue<T>>(std::move(value));
}

/// In forward: keeps `held` in `ctx`'s saved data under `key`.
template <typename T>
void SaveValue(torch::autograd::AutogradContext* ctx, const std::string& key,
               c10::intrusive_ptr<AutogradValue<T>> held) {
  ctx->saved_data[key] = c10::IValue::make_capsule(std::move(held));
}

/// In backward: the value SaveValue kept under `key`. The reference lives as
/// long as `ctx`'s saved data, which outlasts the backward call.
template <typename T>
const T& SavedValue(torch::autograd::AutogradContext* ctx,
                    const std::string& key) {
  return c10::static_intrusive_pointer_cast<AutogradValue<T>>(
             ctx->saved_data.at(key).toCapsule())
      ->value;
}

}  // namespace dcp

#endif  // DCP_WORKER_AUTOGRAD_SAVED_VALUE_H_
