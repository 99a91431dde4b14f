"""Models wrapped in torch.distributed.fsdp.fully_shard (FSDP2, ZeRO-3):
their weights and gradients are sharded over the whole world, so every
forward all-gathers each unit's weights and every backward reduce-scatters
its gradients, over every rank. dcp_torch's SP groups run inside that
data-parallel world; three things make a plan's math and collectives right
under it:

 - every rank runs the same number of forward and backward passes in a step
   (in each layout, the most micro-batches of any of its groups): ranks
   with fewer run padding micro-batches whose loss counts nothing
   (MicroBatch.counts);
 - the reduce-scatters sum (a divide factor of 1): step.loss_scale already
   makes the sum over ranks the global batch's mean;
 - Step.sync_gradients all-reduces nothing (the reduce-scatters did it).

The planner is told (optimizer_sharding "zero3") and prices the all-gathers
and reduce-scatters per micro-batch."""

from __future__ import annotations

import contextlib
from typing import Any, Iterable, Iterator

import torch
from torch.distributed.fsdp import FSDPModule


def is_fully_sharded(model: torch.nn.Module) -> bool:
    """Whether fully_shard wrapped `model` or any of its modules."""
    return any(isinstance(m, FSDPModule) for m in model.modules())


def prepare(model: torch.nn.Module) -> None:
    """Makes every fully_shard unit of `model` sum its gradients over the
    ranks instead of averaging them (FSDP2's default divides by the world
    size, which would scale dcp_torch's per-token loss down), with plain
    sum reductions (Gloo has no pre-multiplied sum)."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def micro_batches_per_rank(groups: Iterable[Any]) -> int:
    """How many micro-batches every rank runs in a layout of these groups
    (dcp.v1.Group) under fully_shard: the most of any group."""
    return max((len(g.micro_batches) for g in groups), default=0)


@contextlib.contextmanager
def unsharded(model: torch.nn.Module,
              block: torch.nn.Module) -> Iterator[None]:
    """`block`'s weights whole while the block runs outside the model's
    forward (the profiler calls its nn.Linear modules directly): the
    fully_shard unit that holds them (the block or, if it is not wrapped
    itself, the model) is all-gathered, and resharded after. Collective:
    every rank must enter it. A no-op for a model fully_shard did not wrap."""
    owner = block if isinstance(block, FSDPModule) else model
    if not isinstance(owner, FSDPModule):
        yield
        return
    owner.unshard()
    try:
        yield
    finally:
        owner.reshard()
