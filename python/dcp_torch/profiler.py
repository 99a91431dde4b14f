"""In-process micro-benchmarks of the user's own model and collectives, as
the ProfileSamples (proto/dcp/v1/profile.proto) the planner fits its cost
model to: no second launch. Mirrors worker/execution/profiler.h:

 - GEMM, per gemm_tokens T: the forward of the first block's nn.Linear
   modules on random [T, in_features] inputs (no autograd); flops = the sum
   of 2 * in * out * T over them.
 - ATTENTION_FORWARD / ATTENTION_BACKWARD, per attention_lengths L: the
   attention core (the one dcp_torch.attention uses) over one sequence of L
   tokens with all the model's heads at its head width
   (ModelSpec.attention_head_dim), forward, and backward (the forward
   untimed); flops = 4 * hidden * L^2 (halved if causal), the planner's
   count, even where heads x head_dim differs from hidden.
 - ALL_TO_ALL, per SP size s (powers of two dividing the world) and
   all_to_all_bytes: all_to_all_single over blocks of s consecutive planner
   ranks (each block's SP group, created as the plan's would be).
 - ALL_REDUCE, per all_reduce_bytes: over the world.

Each measurement is the median of `repeats` runs after `warmup` untimed ones.
Collective: every rank must call profile() with equal options. Not
thread-safe."""

import dataclasses
import statistics

import torch
import torch.distributed as dist

from dcp_torch import context
from dcp_torch import spec as spec_lib
from dcp_torch._proto import profile_pb2
from dcp_torch.ulysses import sdpa_core

Sample = profile_pb2.ProfileSample


@dataclasses.dataclass
class ProfileOptions:
    """Sizes of the quick CPU profile by default; a GPU wants larger ones
    (e.g. GEMMs of 512..16K tokens, collectives of 1..256 MiB)."""
    repeats: int = 3
    warmup: int = 1
    gemm_tokens: tuple = (1, 8, 64, 256, 1024)
    attention_lengths: tuple = (16, 32, 64, 128, 256)
    all_to_all_bytes: tuple = (16 << 10, 64 << 10, 256 << 10, 1 << 20)
    all_reduce_bytes: tuple = (16 << 10, 64 << 10, 256 << 10, 1 << 20)
    dtype: torch.dtype = torch.float32


def _median_seconds(run, options, synchronize, before=None):
    times = []
    for attempt in range(options.warmup + options.repeats):
        state = before() if before else None
        with context.Timer(synchronize) as timer:
            run(state)
        if attempt >= options.warmup:
            times.append(timer.seconds)
    return max(statistics.median(times), 1e-9)


def profile(spec, blocks, sp_groups, torch_rank_of, gpus_per_node, device,
            options=None, core=None):
    """The samples this rank measured (a list of ProfileSample).
    `torch_rank_of[p]` is the torch rank of planner rank p."""
    spec = spec_lib.as_model_spec(spec)
    options = options or ProfileOptions()
    synchronize = context.device_synchronizer(device)
    samples = []
    linears = [m for m in blocks[0].modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        raise ValueError("the first block has no torch.nn.Linear modules to "
                         "profile its GEMMs; pass profile=False and fit the "
                         "planner another way")
    with torch.no_grad():
        for tokens in options.gemm_tokens:
            inputs = [torch.randn(tokens, m.in_features, device=device,
                                  dtype=m.weight.dtype) for m in linears]

            def run_gemms(_, inputs=inputs):
                for module, x in zip(linears, inputs):
                    module(x)
            seconds = _median_seconds(run_gemms, options, synchronize)
            flops = sum(2.0 * m.in_features * m.out_features * tokens
                        for m in linears)
            samples.append(Sample(op=Sample.GEMM, flops=flops, tokens=tokens,
                                  measured_seconds=seconds))
    core = core or sdpa_core
    heads = spec.num_attention_heads
    # Timed at the model's own head width; the flops stay the planner's
    # (4 * hidden per squared token), so that the rate fitted to them
    # predicts this model's attention times.
    head_dim = spec.attention_head_dim
    dtype = linears[0].weight.dtype
    for length in options.attention_lengths:
        flops = 4.0 * spec["hidden_size"] * (0.5 if spec["causal"] else 1.0) \
            * length * length

        def make(length=length):
            return [torch.randn(heads, length, head_dim, device=device,
                                dtype=dtype, requires_grad=True)
                    for _ in range(3)]
        with torch.no_grad():
            forward = _median_seconds(
                lambda qkv: core(*qkv, spec["causal"]), options, synchronize,
                before=make)

        def forward_only(length=length):
            qkv = make(length)
            return core(*qkv, spec["causal"]).sum()
        backward = _median_seconds(lambda loss: loss.backward(), options,
                                   synchronize, before=forward_only)
        for op, seconds in ((Sample.ATTENTION_FORWARD, forward),
                            (Sample.ATTENTION_BACKWARD, backward)):
            samples.append(Sample(op=op, flops=flops,
                                  sum_squared_lengths=float(length * length),
                                  sum_lengths=length, measured_seconds=seconds))
    samples += _profile_collectives(sp_groups, torch_rank_of, gpus_per_node,
                                    device, options, synchronize)
    return samples


def _profile_collectives(sp_groups, torch_rank_of, gpus_per_node, device,
                         options, synchronize):
    world = dist.get_world_size()
    planner_rank = torch_rank_of.index(dist.get_rank())
    element = torch.tensor([], dtype=options.dtype).element_size()
    samples = []
    dist.barrier()
    size = 2
    while size <= world:
        if world % size == 0:
            blocks = [[torch_rank_of[p] for p in range(b, b + size)]
                      for b in range(0, world, size)]
            sp_groups.use(blocks)
            first = planner_rank // size * size
            group = sp_groups.get(blocks[first // size])
            inter_node = first // gpus_per_node != \
                (first + size - 1) // gpus_per_node
            for nbytes in options.all_to_all_bytes:
                chunk = max(1, nbytes // (element * size))
                send = torch.zeros(size * chunk, dtype=options.dtype,
                                   device=device)
                received = torch.empty_like(send)
                seconds = _median_seconds(
                    lambda _: dist.all_to_all_single(received, send,
                                                     group=group),
                    options, synchronize,
                    before=lambda: dist.barrier(group=group))
                samples.append(Sample(op=Sample.ALL_TO_ALL, group_size=size,
                                      inter_node=inter_node,
                                      bytes=send.numel() * element,
                                      measured_seconds=seconds))
        size *= 2
    if world > 1:
        for nbytes in options.all_reduce_bytes:
            buffer = torch.zeros(max(1, nbytes // element), dtype=options.dtype,
                                 device=device)
            seconds = _median_seconds(lambda _: dist.all_reduce(buffer),
                                      options, synchronize,
                                      before=dist.barrier)
            samples.append(Sample(op=Sample.ALL_REDUCE, group_size=world,
                                  inter_node=world > gpus_per_node,
                                  bytes=buffer.numel() * element,
                                  measured_seconds=seconds))
    dist.barrier()
    return samples
