"""Ulysses sequence parallelism around the user's attention: a drop-in
`attention(q, k, v, causal=...)` for packed sequences.

Each member of an SP group of size P holds a contiguous chunk of the packed
token stream with all heads. An all-to-all turns that into the whole stream
with 1/P of the heads, attention runs per sequence (block-diagonal masks,
causal or not), and a second all-to-all brings the output back to the
member's tokens with all heads. The all-to-alls are differentiable: the
backward of each is the opposite all-to-all.
"""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dcp_torch import context


class HeadsNotDivisibleError(ValueError):
    """The SP size of a plan cannot split the model's heads."""


def _all_to_all(x, group, sp_size, scatter_heads):
    """scatter_heads: [c, H, D] on each member -> [P*c, H/P, D] (the stream,
    this member's heads). Else the inverse: [P*c, h, D] -> [c, P*h, D]."""
    if scatter_heads:
        c, heads, dim = x.shape
        send = x.reshape(c, sp_size, heads // sp_size, dim).transpose(0, 1)
    else:
        total, heads, dim = x.shape
        send = x.reshape(sp_size, total // sp_size, heads, dim)
    send = send.contiguous()
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send, group=group)
    if scatter_heads:
        return received.reshape(sp_size * c, heads // sp_size, dim)
    return received.transpose(0, 1).reshape(total // sp_size,
                                             sp_size * heads, dim)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, packing, scatter_heads):
        ctx.packing = packing
        ctx.scatter_heads = scatter_heads
        with context.Timer(packing.synchronize) as timer:
            out = _all_to_all(x, packing.group, packing.sp_size, scatter_heads)
        packing.add_communication(timer.seconds)
        return out

    @staticmethod
    def backward(ctx, grad):
        packing = ctx.packing
        with context.Timer(packing.synchronize) as timer:
            out = _all_to_all(grad.contiguous(), packing.group,
                              packing.sp_size, not ctx.scatter_heads)
        packing.add_communication(timer.seconds)
        return out, None, None


def sdpa_core(q, k, v, causal):
    """Default attention core over one sequence: q [heads, L, D], k and v
    [heads, L, D] (KV heads already repeated); returns [heads, L, D]."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def packed_attention(q, k, v, cu_seqlens, causal, padded=False, core=None):
    """Attention over packed sequences in one process: q [T, H, D], k and v
    [T, Hkv, D] with Hkv dividing H (grouped-query attention), sequence s
    being tokens cu_seqlens[s]:cu_seqlens[s+1]. With `padded`, the last
    segment is padding: its output is zero. Returns [T, H, D]."""
    core = core or sdpa_core
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads % kv_heads:
        raise ValueError(f"{kv_heads} key/value heads do not divide "
                         f"{heads} query heads")
    repeat = heads // kv_heads
    outputs = []
    segments = len(cu_seqlens) - 1
    for s in range(segments):
        start, end = cu_seqlens[s], cu_seqlens[s + 1]
        if padded and s == segments - 1:
            outputs.append(q.new_zeros((end - start,) + tuple(q.shape[1:])))
            continue
        qs = q[start:end].transpose(0, 1)
        ks = k[start:end].transpose(0, 1)
        vs = v[start:end].transpose(0, 1)
        if repeat > 1:
            ks = ks.repeat_interleave(repeat, dim=0)
            vs = vs.repeat_interleave(repeat, dim=0)
        outputs.append(core(qs, ks, vs, causal).transpose(0, 1))
    return torch.cat(outputs, dim=0) if outputs else q.new_zeros(q.shape)


def attention(q, k, v, causal=True, core=None):
    """The drop-in attention of a model run by dcp_torch.

    q: [T, H, D], k and v: [T, Hkv, D] for this rank's T tokens of the
    running micro-batch (`with mb:`; or `with dcp_torch.packed(lengths):` in
    a single process). `causal` masks each sequence causally; False is full
    (bidirectional) attention within each sequence. `core(q, k, v, causal)`
    computes one sequence's attention on [heads, L, D] tensors (default:
    torch's scaled_dot_product_attention). Returns [T, H, D].

    Where the SP size does not divide Hkv, the KV heads are first repeated
    to lcm(Hkv, SP size) so that each rank gets whole heads (as the C++
    worker does; the planner prices the larger all-to-all and memory).

    HeadsNotDivisibleError when the SP size does not divide H."""
    packing = context.current()
    if packing is None:
        raise RuntimeError(
            "dcp_torch.attention ran outside a micro-batch: call the model "
            "inside `with mb:` (or `with dcp_torch.packed(lengths):`)")
    sp = packing.sp_size
    if sp == 1:
        return packed_attention(q, k, v, packing.cu_seqlens, causal,
                                packing.padded, core)
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads % sp:
        raise HeadsNotDivisibleError(
            f"the plan runs this micro-batch at SP size {sp}, which cannot "
            f"split the model's {heads} attention heads (Ulysses gives each "
            f"rank 1/{sp} of them); start dcp_planner with the model's true "
            "head counts (dcp_torch.model_spec) so that it plans only SP "
            "sizes dividing them")
    kv_copies = sp // math.gcd(kv_heads, sp)
    if kv_copies > 1:
        k = k.repeat_interleave(kv_copies, dim=1)
        v = v.repeat_interleave(kv_copies, dim=1)
    q, k, v = (_AllToAll.apply(t, packing, True) for t in (q, k, v))
    out = packed_attention(q, k, v, packing.cu_seqlens, causal,
                           packing.padded, core)
    return _AllToAll.apply(out, packing, False)
