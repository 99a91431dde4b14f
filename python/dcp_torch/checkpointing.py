"""The plan's checkpointed layers applied to the user's blocks: in a
micro-batch with MicroBatch.checkpointed_layers = k, the first k blocks run
under torch.utils.checkpoint (their activations are recomputed in the
backward pass, all-to-alls included); the others keep theirs."""

from __future__ import annotations

import functools
from typing import Iterable

import torch
from torch.utils.checkpoint import checkpoint

from dcp_torch import context


def apply_checkpointing(blocks: Iterable[torch.nn.Module]) -> None:
    """Wraps each block's forward (once; calling again is a no-op). Outside
    a micro-batch, or with gradients off, blocks run as before."""
    for index, block in enumerate(blocks):
        if getattr(block, "_dcp_torch_block_index", None) is not None:
            continue
        block._dcp_torch_block_index = index
        block.forward = _checkpointed_forward(block.forward, index)


def _checkpointed_forward(forward, index):
    @functools.wraps(forward)
    def run(*args, **kwargs):
        packing = context.current()
        if (packing is None or index >= packing.checkpointed_layers
                or not torch.is_grad_enabled()):
            return forward(*args, **kwargs)

        def recomputable(*inner_args, **inner_kwargs):
            # The recompute runs in backward: give it the forward's packing.
            with context.active(packing):
                return forward(*inner_args, **inner_kwargs)

        return checkpoint(recomputable, *args, use_reentrant=False, **kwargs)

    return run
