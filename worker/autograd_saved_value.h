#ifndef DCP_WORKER_AUTOGRAD_SAVED_VALUE_H_
#define DCP_WORKER_AUTOGRAD_SAVED_VALUE_H_

// Carrying a plain C++ value (a layer function, a communicator context)
// from a custom autograd Function's forward to its backward. Function::apply
// passes a non-tensor argument straight through to forward, which takes the
// value itself; the context's saved data holds only IValues, so SaveValue
// puts the value in a capsule and SavedValue reads it back.

#include <string>
#include <utility>

#include "torch/torch.h"

namespace dcp {

/// A value of type `T` kept in saved data. Immutable once made;
/// thread-compatible.
template <typename T>
struct AutogradValue : torch::CustomClassHolder {
  explicit AutogradValue(T v) : value(std::move(v)) {}
  const T value;
};

/// In forward: keeps `value` in `ctx`'s saved data under `key`.
template <typename T>
void SaveValue(torch::autograd::AutogradContext* ctx, const std::string& key,
               T value) {
  ctx->saved_data[key] = c10::IValue::make_capsule(
      c10::make_intrusive<AutogradValue<T>>(std::move(value)));
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
