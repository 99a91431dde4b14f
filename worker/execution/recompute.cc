#include "worker/execution/recompute.h"

#include <utility>

#include "worker/autograd_saved_value.h"

namespace dcp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Recompute in backward of a layer of several inputs, each of which gets its
// gradient.
class CheckpointFunction
    : public torch::autograd::Function<CheckpointFunction> {
 public:
  // `parameters` are inputs only so that the node is part of the graph
  // whenever a parameter requires grad; their gradients are accumulated by
  // the re-run's own backward, not returned.
  static torch::Tensor forward(AutogradContext* ctx, at::TensorList inputs,
                               at::TensorList parameters,
                               MultiInputLayerFunction layer) {
    // Function::apply runs this with grad mode off: no graph is kept.
    std::vector<torch::Tensor> kept(inputs.begin(), inputs.end());
    torch::Tensor output = layer(kept);
    ctx->save_for_backward(kept);
    SaveValue(ctx, "layer", std::move(layer));
    ctx->saved_data["num_parameters"] = static_cast<int64_t>(parameters.size());
    return output;
  }

  static variable_list backward(AutogradContext* ctx,
                                variable_list grad_outputs) {
    const MultiInputLayerFunction& layer =
        SavedValue<MultiInputLayerFunction>(ctx, "layer");
    const int64_t num_parameters = ctx->saved_data["num_parameters"].toInt();
    const variable_list inputs = ctx->get_saved_variables();
    std::vector<torch::Tensor> detached;
    detached.reserve(inputs.size());
    for (const torch::Tensor& input : inputs) {
      detached.push_back(input.detach().requires_grad_(input.requires_grad()));
    }
    torch::Tensor output;
    {
      torch::AutoGradMode enable_grad(true);
      output = layer(detached);
    }
    // Reentrant backward: accumulates into the parameters' and `detached`'s
    // gradients.
    torch::autograd::backward({output}, {grad_outputs[0]});

    variable_list grads;
    grads.reserve(inputs.size() + num_parameters + 1);
    for (size_t i = 0; i < inputs.size(); ++i) {
      torch::Tensor grad = detached[i].grad();
      if (!grad.defined() && inputs[i].requires_grad()) {
        grad = torch::zeros_like(inputs[i]);
      }
      grads.push_back(grad);
    }
    for (int64_t i = 0; i < num_parameters; ++i) {
      grads.emplace_back();  // Already accumulated by the re-run.
    }
    grads.emplace_back();  // The layer.
    return grads;
  }
};

}  // namespace

torch::Tensor CheckpointedForwardOfInputs(
    MultiInputLayerFunction layer, const std::vector<torch::Tensor>& inputs,
    const std::vector<torch::Tensor>& parameters) {
  if (!torch::GradMode::is_enabled()) return layer(inputs);
  return CheckpointFunction::apply(
      at::TensorList(inputs), at::TensorList(parameters), std::move(layer));
}

torch::Tensor CheckpointedForward(
    LayerFunction layer, const torch::Tensor& input,
    const std::vector<torch::Tensor>& parameters) {
  if (!torch::GradMode::is_enabled()) return layer(input);
  return CheckpointedForwardOfInputs(
      [layer = std::move(layer)](const std::vector<torch::Tensor>& inputs) {
        return layer(inputs[0]);
      },
      {input}, parameters);
}

}  // namespace dcp
