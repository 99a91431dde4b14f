"""dcp_torch.init and the objects of a training loop: Runtime (one per
process), Step (one per optimizer step) and MicroBatch (one per forward and
backward pass this rank runs).

    rt = dcp_torch.init(model, blocks=model.layers)
    for step in rt.steps(sampler, fetch=dataset.__getitem__):
        for mb in step:
            with mb:
                loss = mb.token_loss_sum(per_token_loss(model, mb.inputs))
                (loss * step.loss_scale).backward()
        step.sync_gradients(); optimizer.step(); optimizer.zero_grad()
        step.report()

Thread model: a Runtime and its Steps belong to the training thread; only
the stats reporter runs on a thread of its own.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import (Any, Callable, Iterable, Iterator, Mapping, Optional,
                    Sequence, Tuple)

import torch
import torch.distributed as dist

from dcp_torch import checkpointing, context, devices, sharding
from dcp_torch import spec as spec_lib
from dcp_torch import spec_from_module, transformers_support
from dcp_torch import profiler as profiler_lib
from dcp_torch._proto import batch_pb2
from dcp_torch._proto import planner_service_pb2 as pb
from dcp_torch.fingerprint import batch_fingerprint
from dcp_torch.planner_client import PlannerClient, PlannerError
from dcp_torch.errors import EmptyBatchError, RankDivergedError
from dcp_torch.sp_groups import SpGroups
from dcp_torch.stats_reporter import StatsReporter
from dcp_torch.step import Step, plan_layouts
from dcp_torch.ulysses import HeadsNotDivisibleError

import grpc

# fetch(sample_id): the sample's tensors by name (Runtime.steps).
Fetch = Callable[[int], Mapping[str, Any]]
# core(q, k, v, causal) over one sequence's [heads, L, D] tensors.
AttentionCore = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool],
                         torch.Tensor]


def init(model: torch.nn.Module, blocks: Iterable[torch.nn.Module],
         planner_address: Optional[str] = None, *,
         spec: Optional[spec_lib.SpecLike] = None,
         worker_id: Optional[str] = None, node_name: Optional[str] = None,
         profile: bool = True,
         profile_options: Optional[profiler_lib.ProfileOptions] = None,
         attention_core: Optional[AttentionCore] = None,
         registration_timeout_seconds: float = 300.0,
         collective_timeout_seconds: float = 300.0,
         max_cached_groups: Optional[int] = None,
         log: Optional[Callable[[str], None]] = None,
         client: Optional[PlannerClient] = None) -> Runtime:
    """Connects this process to the planner and prepares `model`.

    model: the user's torch.nn.Module (the same on every rank).
    blocks: its transformer blocks in order (e.g. model.layers); the plan's
      checkpointed layers apply to them.
    planner_address: HOST:PORT of dcp_planner; default $DCP_PLANNER_ADDRESS.
    spec: the ModelSpec (dcp_torch.model_spec; a dict of its fields is
      accepted and checked); default read from the
      module and its model.config (dcp_torch.model_spec_from_module, whose
      error names any field it cannot read). It must match the model the
      planner was started with (checked at registration).
    max_cached_groups: the most SP sub-groups a rank keeps (least recently
      used released first, alike on every rank); 0: no bound (Gloo only:
      each NCCL communicator holds ~0.6 GB of GPU memory the planner counts);
      None: 4 on NCCL, no bound on Gloo. Sent with the registration.
    worker_id, node_name: this process's stable identity and its node
      (default: "<host>-rank<R>" and the host name).
    profile: measure the blocks' GEMMs, the attention core and the
      collectives here and submit them, unless the planner already has a
      fitted profile (ProfileOptions in profile_options).
    attention_core: core(q, k, v, causal) over [heads, L, D] that the
      profile times; give the same one to dcp_torch.attention.

    A model on CUDA must be on this rank's GPU (dcp_torch.local_device(),
    from $LOCAL_RANK), which becomes the current CUDA device before any
    collective. torch.distributed is initialized from the environment
    (torchrun's variables) unless it already is; NCCL or Gloo is chosen
    from the model's device (CUDA or CPU), for the world and the SP groups. Collective:
    every rank calls init. Raises PlannerUnreachableError (naming the
    address) when the planner cannot be reached, ValueError when its model
    or world size differs from this job's."""
    log = log or (lambda message: print(message, flush=True))
    transformers_support.check_prepared(model)  # an HF model: prepared?
    # Before any collective: each rank's NCCL work on its own GPU.
    device = devices.bind_rank_device(next(model.parameters()).device)
    backend = devices.collective_backend(device)
    if not dist.is_initialized():
        dist.init_process_group(backend)
    rank = dist.get_rank()
    blocks = list(blocks)
    if spec is None:
        spec = spec_from_module.model_spec_from_module(model, blocks)
    spec = spec_lib.as_model_spec(spec)
    if spec.num_layers != len(blocks):
        raise ValueError(f"ModelSpec.num_layers is {spec.num_layers} but "
                         f"{len(blocks)} blocks were given; pass every "
                         "transformer block once")
    client = client or PlannerClient(planner_address)
    node_name = node_name or socket.gethostname()
    worker_id = worker_id or f"{node_name}-rank{rank}"
    if max_cached_groups is None:
        # dcp's kDefaultNcclMaxCachedGroups (cost_model/memory_model.h).
        max_cached_groups = 4 if backend == "nccl" else 0
    runtime = Runtime(client, spec, model, blocks, worker_id, device,
                      SpGroups(collective_timeout_seconds, max_cached_groups,
                               backend=backend),
                      log)
    try:
        runtime._register(node_name, registration_timeout_seconds)
        checkpointing.apply_checkpointing(blocks)
        if profile:
            runtime._profile(profile_options, attention_core)
    except BaseException:
        runtime.close()  # the reporter's thread, the groups, the channel
        raise
    return runtime


class Runtime:
    """One process's connection to the planner; see init()."""

    def __init__(self, client: PlannerClient, spec: spec_lib.ModelSpec,
                 model: torch.nn.Module, blocks: Sequence[torch.nn.Module],
                 worker_id: str, device: torch.device, sp_groups: SpGroups,
                 log: Callable[[str], None]) -> None:
        self.client = client
        self.spec = spec
        self.model = model
        self.blocks = blocks
        self.worker_id = worker_id
        # New at every start: the planner refuses an earlier process (or a
        # second copy of the job) that uses the same worker_id.
        self.incarnation = uuid.uuid4().hex[:16]
        self.device = device
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        # Wrapped in fully_shard: ZeRO-3 (dcp_torch.sharding).
        self.fully_sharded = sharding.is_fully_sharded(model)
        if self.fully_sharded:
            sharding.prepare(model)
        self.log = log
        self.sp_groups = sp_groups
        self.reporter = StatsReporter(client, log)
        self._synchronize = context.device_synchronizer(device)
        self.planner_rank = None
        self.torch_rank_of = None  # planner rank -> torch rank
        self.cluster = None
        self.last_plan = None

    # --- init's phases -----------------------------------------------------

    def _training_state(self) -> dict:
        """What the planner's memory model counts of this rank: its
        module's dtype (2 bytes: bf16 with float32 master weights and AdamW
        states; 4: fp32) and its sharding: weights, gradients and optimizer
        state sharded over the world under fully_shard ("zero3"), else an
        optimizer dcp_torch does not shard ("none"). Other dtypes (an fp64
        test model) are not declared: the planner keeps its defaults and
        budgets for its own ModelSpec."""
        precision = {2: "bf16", 4: "fp32"}.get(self.spec.dtype_bytes)
        if precision is None:
            return {}
        return {"precision": precision,
                "optimizer_sharding": "zero3" if self.fully_sharded
                else "none"}

    def _register(self, node_name, timeout_seconds):
        request = pb.RegisterWorkerRequest(
            worker_id=self.worker_id, node_name=node_name, num_ranks=1,
            incarnation=self.incarnation,
            **self._training_state(),
            # The launcher's job id: a planner with --job-id accepts only it.
            job_id=os.environ.get("DCP_JOB_ID", ""),
            backend=self.sp_groups.backend,
            max_cached_groups=self.sp_groups.max_cached_groups,
            gpu_kind=(torch.cuda.get_device_name(self.device)
                      if self.device.type == "cuda" else "cpu"),
            libtorch_version=torch.__version__)
        deadline = time.monotonic() + timeout_seconds
        wait, waiting_for = 0.05, None
        while True:
            response = self.client.register_worker(request)
            if response.world_complete:
                break
            if response.waiting_for != waiting_for and self.rank == 0:
                waiting_for = response.waiting_for
                self.log(f"dcp_torch: waiting for the world: {waiting_for}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the planner at {self.client.address} still waits for "
                    f"{response.waiting_for} after {timeout_seconds:.0f} s; "
                    "start every rank (it expects "
                    f"{response.world_size} in all)")
            time.sleep(wait)  # the planner learns of other ranks meanwhile
            wait = min(wait * 2, 1.0)
        if response.world_size != self.world_size:
            raise ValueError(
                f"the planner at {self.client.address} plans for "
                f"{response.world_size} ranks but torch.distributed has "
                f"{self.world_size}; start dcp_planner with --nodes x "
                f"--gpus-per-node = {self.world_size}")
        spec_lib.check_matches_planner(self.spec, response.model)
        self.cluster = response.cluster
        self.planner_rank = response.first_rank
        gathered = [None] * self.world_size
        dist.all_gather_object(gathered, self.planner_rank)
        if sorted(gathered) != list(range(self.world_size)):
            raise RankDivergedError(
                f"the planner gave the ranks {gathered} (by torch rank); "
                "each process must register with its own worker_id")
        self.torch_rank_of = [gathered.index(p)
                              for p in range(self.world_size)]

    def _profile(self, options, core):
        wanted = self.client.get_cluster_model().using_default_params
        flag = torch.tensor([1.0 if wanted else 0.0], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # collective if any wants
        if flag.item() == 0:
            if self.rank == 0:
                self.log("dcp_torch: the planner already has a fitted "
                         "profile; not profiling again")
            return
        options = options or profiler_lib.ProfileOptions()
        start = time.perf_counter()
        with sharding.unsharded(self.model, self.blocks[0]):
            samples = profiler_lib.profile(
                self.spec, self.blocks, self.sp_groups, self.torch_rank_of,
                self.cluster.gpus_per_node, self.device, options, core)
        response = self.client.submit_profile(pb.SubmitProfileRequest(
            worker_id=self.worker_id, incarnation=self.incarnation,
            samples=samples))
        dist.barrier()  # every rank's samples are in before anyone plans
        if self.rank == 0:
            fitted = self.client.get_cluster_model()
            self.log(f"dcp_torch: profiled {len(samples)} samples per rank "
                     f"in {time.perf_counter() - start:.2f} s; cost model "
                     f"params v{fitted.params_version}")
            for report in fitted.reports:
                if report.used_defaults:
                    self.log(f"  fit {report.name}: defaults kept "
                             f"({report.num_samples} samples; {report.note})")
                else:
                    self.log(f"  fit {report.name}: {report.num_samples} "
                             "samples, rms error "
                             f"{100 * report.rms_relative_error:.1f}%")
        del response

    # --- the training loop -------------------------------------------------

    def steps(self, sampler: Iterable[Sequence[Tuple[int, int]]],
              fetch: Fetch, first_step: int = 0,
              sequence_keys: Iterable[str] = ()) -> Iterator[Step]:
        """Yields one Step per global batch of `sampler`.

        sampler: an iterable of global batches, each a list of
          (sample_id, length_tokens) pairs; every rank must iterate the same
          batches in the same order. Rank 0 submits each batch to the planner
          one step ahead; every rank fetches the step's plan by step and
          batch fingerprint.
        fetch(sample_id): the sample as a dict of tensors. Tensors whose
          first dimension is the sample's length are token tensors (packed,
          split over the SP group, padded); 0-dim tensors and keys in
          `sequence_keys` are per-sequence (stacked). An optional "loss_mask"
          token tensor marks the tokens that count in the loss. Anything
          else (a list, a list of values) is a TypeError naming the sample,
          the key and what fetch returned.
        """
        batches = iter(sampler)
        step_number = first_step
        current, error = self._try_next_batch(batches, step_number)
        if self.rank == 0 and current is not None:
            self._submit(current, step_number)
        while current is not None or error is not None:
            upcoming, upcoming_error = self._try_next_batch(batches,
                                                            step_number + 1)
            if self.rank == 0 and upcoming is not None:
                self._submit(upcoming, step_number + 1)
            plan = None
            if error is None:
                try:
                    plan = self._plan_of(current, step_number)
                except Exception as plan_error:  # raised on every rank below
                    error = plan_error
            yield Step(self, step_number, current, plan, fetch,
                       frozenset(sequence_keys), error)
            current, error = upcoming, upcoming_error
            step_number += 1

    def close(self) -> None:
        """Sends the queued step reports, releases the SP groups and closes
        the planner channel."""
        self.reporter.flush()
        self.reporter.close()
        self.sp_groups.close()
        self.client.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    # --- plans -------------------------------------------------------------

    def _try_next_batch(self, batches, step):
        """(batch, None), (None, None) at the end, or (None, the error)."""
        try:
            return self._next_batch(batches, step), None
        except StopIteration:
            return None, None
        except Exception as error:  # raised on every rank by its Step
            return None, error

    def _next_batch(self, batches, step):
        batch = next(batches)
        batch = [(int(i), int(n)) for i, n in batch]
        if not batch:
            raise EmptyBatchError(
                f"the sampler yielded an empty global batch for step {step}; "
                "every step needs at least one sample (drop empty batches, "
                "or stop the sampler)")
        for sample_id, length in batch:
            if length <= 0:
                raise ValueError(
                    f"sample {sample_id} of step {step} has length {length}; "
                    "lengths are token counts, at least 1")
        return batch

    @staticmethod
    def _batch_proto(batch, step):
        return batch_pb2.GlobalBatch(step=step, samples=[
            batch_pb2.Sample(id=i, length_tokens=n) for i, n in batch])

    def _submit(self, batch, step):
        try:
            self.client.submit_batches(pb.SubmitBatchesRequest(
                worker_id=self.worker_id, incarnation=self.incarnation,
                batches=[self._batch_proto(batch, step)]))
        except PlannerError as error:
            self.log(f"dcp_torch: warning: SubmitBatches of step {step} "
                     f"failed (it will be planned on demand): {error}")

    def _plan_of(self, batch, step, wait_for_rank0_seconds=30.0):
        """The step's plan, fetched by step and fingerprint. Rank 0 submits
        every batch, so the batch the planner has is rank 0's: another rank
        whose fingerprint differs has diverged. A step the planner does not
        know yet is waited for (other ranks, up to wait_for_rank0_seconds)
        or planned from this rank's batch (rank 0, or after the wait)."""
        fingerprint = batch_fingerprint(batch)
        request = pb.GetPlanRequest(worker_id=self.worker_id, step=step,
                                    incarnation=self.incarnation,
                                    batch_fingerprint=fingerprint)
        deadline = time.monotonic() + wait_for_rank0_seconds
        wait = 0.01
        while True:
            try:
                response = self.client.get_plan(request)
                break
            except PlannerError as by_step:
                if by_step.code != grpc.StatusCode.FAILED_PRECONDITION:
                    raise
                if "fingerprint" in by_step.details:
                    raise RankDivergedError(
                        f"rank {self.rank}'s batch for step {step} "
                        f"(fingerprint {fingerprint:#018x}) is not the one "
                        f"the planner has for that step: {by_step.details}. "
                        "Every rank must iterate the same sampler (same "
                        "seed, same order)") from None
                if (self.rank != 0 and "is unknown" in by_step.details
                        and time.monotonic() < deadline):
                    time.sleep(wait)  # rank 0's SubmitBatches is on its way
                    wait = min(2 * wait, 0.5)
                    continue
                request.batch.CopyFrom(self._batch_proto(batch, step))
                try:
                    response = self.client.get_plan(request)
                    break
                except PlannerError as with_batch:
                    raise RankDivergedError(
                        f"rank {self.rank}'s batch for step {step} "
                        f"(fingerprint {fingerprint:#018x}) cannot be "
                        f"planned: {by_step.details}; with the batch: "
                        f"{with_batch.details}") from None
        plan = response.plan
        if plan.step != step:
            raise RankDivergedError(f"asked for the plan of step {step} and "
                                    f"got step {plan.step}")
        if response.sample_ids and list(response.sample_ids) != \
                [i for i, _ in batch]:
            raise RankDivergedError(
                f"the plan of step {step} was made for other sample ids than "
                f"rank {self.rank}'s batch")
        _check_plan(plan, len(batch), self.world_size, step, self.spec)
        self.last_plan = plan
        return plan


def _check_plan(plan, num_samples, world_size, step, spec):
    """Every rank in at most one group of each layout (the plan's phases,
    or its one layout), every sample in exactly one micro-batch of the
    step (else the loss scale and gradients would be wrong), every group's
    SP size dividing the model's heads (raised here, alike on every rank,
    rather than in one group's attention while the others wait)."""
    if plan.phases and plan.groups:
        raise RankDivergedError(
            f"the plan of step {step} has both phases and groups; a plan of "
            "phases keeps its groups in them")
    seen_samples = []
    for layout in plan_layouts(plan):
        seen_samples += _check_layout(layout, world_size, step, spec)
    if sorted(seen_samples) != list(range(num_samples)):
        raise RankDivergedError(
            f"the plan of step {step} does not run each of the batch's "
            f"{num_samples} samples exactly once")


def _check_layout(groups, world_size, step, spec):
    """The samples of one layout's groups, after checking that they
    partition ranks of the world and divide the heads."""
    seen_ranks, seen_samples = set(), []
    heads, kv_heads = spec.num_attention_heads, spec.num_kv_heads
    for group in groups:
        sp = len(group.ranks)
        if heads % sp or kv_heads % sp:
            raise HeadsNotDivisibleError(
                f"the plan of step {step} runs an SP group of {sp} ranks, "
                f"which cannot split the model's {heads} attention heads "
                f"and {kv_heads} key/value heads (Ulysses gives each rank "
                f"1/{sp} of both); start dcp_planner with this model's "
                "ModelSpec (dcp_torch.write_model_file) so that it plans "
                "only SP sizes dividing them")
        for r in group.ranks:
            if r in seen_ranks or not 0 <= r < world_size:
                raise RankDivergedError(
                    f"the plan of step {step} puts rank {r} in two groups "
                    f"or outside the world of {world_size}")
            seen_ranks.add(r)
        for micro in group.micro_batches:
            seen_samples += list(micro.sequence_indices)
    return seen_samples
