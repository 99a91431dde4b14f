#ifndef DCP_WORKER_EXECUTION_RECOMPUTE_H_
#define DCP_WORKER_EXECUTION_RECOMPUTE_H_

#include <functional>
#include <vector>

#include "torch/torch.h"

namespace dcp {

/// A layer's forward: one tensor in, one tensor out. It must be a
/// deterministic function of its input and `parameters` (no dropout, no
/// sampling), because it runs twice.
using LayerFunction = std::function<torch::Tensor(const torch::Tensor&)>;

/// Activation checkpointing (LibTorch's C++ frontend has no
/// torch.utils.checkpoint): runs `layer` on `input` without recording a
/// graph, keeping only `input`. In backward it re-runs `layer` with grad
/// enabled on a detached copy of `input` (collectives inside the layer, like
/// Ulysses all-to-alls, run again, in the same order on every group member),
/// backpropagates the incoming gradient through the re-run, and returns the
/// input's gradient; the gradients of `parameters` (and of any other leaf the
/// layer uses) accumulate into their `.grad()` during that re-run.
///
/// `parameters` are the layer's trainable tensors: passing them makes the
/// backward run even when `input` does not require grad. When grad mode is
/// off, this is just `layer(input)`. Exceptions thrown by `layer` propagate
/// (from backward(), when thrown by the re-run).
torch::Tensor CheckpointedForward(LayerFunction layer,
                                  const torch::Tensor& input,
                                  const std::vector<torch::Tensor>& parameters);

/// A layer's forward over several inputs (e.g. the hidden states and a
/// conditioning embedding), with the same determinism requirement.
using MultiInputLayerFunction =
    std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

/// CheckpointedForward for a layer of several inputs: keeps only `inputs`,
/// re-runs `layer` in backward on detached copies of them, and returns each
/// input's gradient (so an input computed from other parameters, such as a
/// conditioning embedding shared by many layers, passes its gradient on
/// through the outer graph rather than being re-entered by the re-run).
/// `inputs` must be non-empty.
torch::Tensor CheckpointedForwardOfInputs(
    MultiInputLayerFunction layer, const std::vector<torch::Tensor>& inputs,
    const std::vector<torch::Tensor>& parameters);

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_RECOMPUTE_H_
