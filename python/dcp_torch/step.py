"""Step: one optimizer step of a rank: its micro-batches, the agreement
collectives, the gradient sync and the step report. Belongs to the training
thread."""

from __future__ import annotations

import itertools
import time
import zlib
from typing import Any, Callable, Iterable, Iterator, List, Mapping, Optional
from typing import Sequence, Tuple

import torch
import torch.distributed as dist

from dcp_torch import context, sharding
from dcp_torch._proto import plan_pb2
from dcp_torch._proto import planner_service_pb2 as pb
from dcp_torch.errors import RankDivergedError
from dcp_torch.micro_batch import MicroBatch


def plan_layouts(plan: Any) -> List[List[Any]]:
    """The groups of each layout of `plan` (a dcp.v1.Plan), in the order
    they run: its phases' when it re-groups the ranks within the step,
    else its one layout."""
    if plan.phases:
        return [list(phase.groups) for phase in plan.phases]
    return [list(plan.groups)]


class Step:
    """One optimizer step: iterate it for this rank's micro-batches (none
    when the plan gives this rank's group nothing; under fully_shard,
    padding ones first up to the busiest group's count), then
    sync_gradients() and report(). `loss_scale` is 1 / the tokens that
    count in the loss over the whole global batch; `plan` is the
    dcp.v1.Plan."""

    def __init__(self, runtime: Any, number: int,
                 batch: Optional[Sequence[Tuple[int, int]]],
                 plan: Optional[Any],
                 fetch: Callable[[int], Mapping[str, Any]],
                 sequence_keys: frozenset,
                 error: Optional[BaseException] = None) -> None:
        self._runtime = runtime
        self.number = number
        self.batch = batch
        self.plan = plan
        self._started = time.perf_counter()
        rt = runtime
        self.group = None
        self.micro_batches: List[MicroBatch] = []
        # Two small collectives make every rank agree before it waits in any
        # other: first on the step and its plan (a rank that could not get
        # its batch or plan stops every rank here, instead of leaving the
        # others waiting to create an SP group with it), then on the loss
        # tokens of the whole global batch (and whether every rank fetched
        # its samples).
        plan_hash = zlib.crc32(plan.SerializeToString(deterministic=True)) \
            if plan is not None else 0
        gathered = self._gather([number, plan_hash, error is not None])
        if error is not None:
            raise error
        self._raise_if_failed(gathered, 2, "get its batch or plan")
        for r, other in enumerate(gathered):
            if other[0] != number or other[1] != plan_hash:
                raise RankDivergedError(
                    f"rank {r} is at step {other[0]} with plan hash "
                    f"{other[1]:#x} while rank {rt.rank} is at step "
                    f"{number} with {plan_hash:#x}; every rank must run the "
                    "same steps of the same sampler")
        try:
            self._prepare(fetch, sequence_keys)
        except Exception as prepare_error:  # raised below, on every rank
            error = prepare_error
        local_tokens = sum(m.loss_tokens for m in self.micro_batches)
        gathered = self._gather([local_tokens, error is not None])
        if error is not None:
            raise error
        self._raise_if_failed(gathered, 1, "fetch its samples")
        self.loss_tokens = sum(g[0] for g in gathered)
        self.loss_scale = 1.0 / max(self.loss_tokens, 1)
        self._sync_seconds = 0.0

    def _gather(self, values):
        """Every rank's `values` (ints), by rank."""
        mine = torch.tensor([int(v) for v in values], dtype=torch.int64,
                            device=self._runtime.device)  # NCCL: on the GPU
        gathered = [torch.zeros_like(mine)
                    for _ in range(self._runtime.world_size)]
        dist.all_gather(gathered, mine)
        return [[int(v) for v in g] for g in gathered]

    def _raise_if_failed(self, gathered, flag, what):
        failed = [r for r, values in enumerate(gathered) if values[flag]]
        if failed:
            raise RankDivergedError(
                f"rank(s) {failed} could not {what} for step {self.number} "
                "(their own error says why); every rank stops at this step")

    def _prepare(self, fetch, sequence_keys):
        """This rank's micro-batches' inputs: those of its group in each
        layout of the plan (a plan that re-groups the ranks within a step
        has several, its phases, run in order; gradients accumulate over
        all of them), numbered phase after phase as the planner counts
        them."""
        rt = self._runtime
        me = rt.planner_rank
        layouts = plan_layouts(self.plan)
        rt.sp_groups.use([[rt.torch_rank_of[p] for p in g.ranks]
                          for layout in layouts for g in layout])
        mine = [next((g for g in layout if me in g.ranks), None)
                for layout in layouts]
        self.group = mine[0]
        # Padding passes (fully_shard) are numbered after the planned ones.
        planned_index = itertools.count()
        padding_index = itertools.count(
            sum(len(g.micro_batches) for g in mine if g is not None))
        shortest = min(self.batch, key=lambda sample: sample[1]) \
            if rt.fully_sharded else None
        for layout, group in zip(layouts, mine):
            members = [rt.rank] if group is None else sorted(
                rt.torch_rank_of[p] for p in group.ranks)
            process_group = rt.sp_groups.get(members)  # None for one rank

            def micro_batch(index, proto, samples, counts=True):
                return MicroBatch(self, index, proto, samples, fetch,
                                  sequence_keys, len(members),
                                  members.index(rt.rank), process_group,
                                  counts)
            planned = [] if group is None else group.micro_batches
            if rt.fully_sharded:
                # Every rank runs as many forward and backward passes in a
                # layout as its busiest group: the others run padding
                # passes first (the batch's shortest sample with a loss
                # that counts nothing, by the whole group alike, or alone by
                # a rank without one), so that the groups' slowest
                # micro-batches, which the plan orders last, run side by
                # side (the planner's LockstepSeconds).
                for _ in range(sharding.micro_batches_per_rank(layout) -
                               len(planned)):
                    self.micro_batches.append(micro_batch(
                        next(padding_index),
                        plan_pb2.MicroBatch(checkpointed_layers=0),
                        [shortest], counts=False))
            for micro in planned:
                self.micro_batches.append(micro_batch(
                    next(planned_index), micro,
                    [self.batch[i] for i in micro.sequence_indices]))

    def __iter__(self) -> Iterator[MicroBatch]:
        return iter(self.micro_batches)

    def __len__(self) -> int:
        return len(self.micro_batches)

    def sync_gradients(
            self, parameters: Optional[Iterable[torch.nn.Parameter]] = None
    ) -> None:
        """One all-reduce (sum) of every gradient over the world, on every
        rank, whether or not it ran a micro-batch (missing gradients count
        as zero); under fully_shard only the check, as every backward has
        reduce-scattered its gradients already. RankDivergedError when any
        rank has not run all of its micro-batches."""
        rt = self._runtime
        parameters = [] if rt.fully_sharded else [
            p for p in (parameters if parameters is not None
                        else rt.model.parameters()) if p.requires_grad]
        not_run = [m.index for m in self.micro_batches if not m.done]
        pieces = [(p.grad if p.grad is not None else torch.zeros_like(p))
                  .reshape(-1) for p in parameters]
        dtype = parameters[0].dtype if parameters else torch.float32
        # One more element counts the ranks that skipped a micro-batch (an
        # exact small integer even in bf16, and nonzero whenever any did).
        flag = torch.tensor([1.0 if not_run else 0.0], dtype=dtype,
                            device=rt.device)
        buffer = torch.cat(pieces + [flag])
        with context.Timer(rt._synchronize) as timer:
            dist.all_reduce(buffer)
        self._sync_seconds = timer.seconds
        incomplete = buffer[-1].item()
        if incomplete != 0:
            raise RankDivergedError(
                f"{round(incomplete)} rank(s) reached sync_gradients "
                f"of step {self.number} without running all their "
                "micro-batches" + (f" (rank {rt.rank} skipped {not_run})"
                                   if not_run else "") +
                "; run every micro-batch the step yields")
        offset = 0
        for p in parameters:
            count = p.numel()
            grad = buffer[offset:offset + count].view_as(p)
            if p.grad is None:
                p.grad = grad.clone()
            else:
                p.grad.copy_(grad)
            offset += count

    def report(self) -> None:
        """Queues this rank's measured times for the planner (sent from a
        background thread): per micro-batch compute and communication
        seconds, the wait at the gradient sync, and the step's seconds."""
        rt = self._runtime
        micro = []
        for m in self.micro_batches:
            if not m.counts:
                continue  # padding: not in the plan; in the step's seconds
            micro.append(pb.MicroBatchStats(
                micro_batch_index=m.index,
                compute_seconds=max(0.0, m.stats.seconds -
                                    m.stats.communication_seconds),
                communication_seconds=m.stats.communication_seconds))
        if micro:
            micro[-1].idle_seconds = self._sync_seconds
        rt.reporter.report(pb.ReportStepStatsRequest(
            worker_id=rt.worker_id, incarnation=rt.incarnation,
            step=self.number, rank=rt.planner_rank,
            step_seconds=max(time.perf_counter() - self._started, 1e-9),
            micro_batches=micro))
