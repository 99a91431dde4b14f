"""Ulysses sequence parallelism around the user's attention: a drop-in
`attention(q, k, v, causal=...)` for packed sequences.

Each member of an SP group of size P holds a contiguous chunk of the packed
token stream with all heads. An all-to-all turns that into the whole stream
with 1/P of the heads, attention runs per sequence (block-diagonal masks,
causal or not), and a second all-to-all brings the output back to the
member's tokens with all heads. The all-to-alls are differentiable: the
backward of each is the opposite all-to-all. The kernel (attention_kernel):
FlashAttention's varlen kernel over the whole stream on CUDA, 4-D SDPA per
sequence elsewhere, or the user's core.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dcp_torch import context
from dcp_torch.attention_kernel import AttentionKernel, choose_kernel


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
    [heads, L, D] (KV heads already repeated); returns [heads, L, D]. Runs
    SDPA on 4-D tensors, which reach its fused kernels (3-D ones get MATH)."""
    return F.scaled_dot_product_attention(
        q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
        is_causal=causal).squeeze(0)


def _check_token_counts(q, k, v):
    """q, k and v are [tokens, heads, head_dim] with one k and v row per
    token of q; else ValueError naming the shapes and the fix."""
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError(
            f"dcp_torch.attention takes q, k and v as [tokens, heads, "
            f"head_dim]; got q {list(q.shape)}, k {list(k.shape)}, v "
            f"{list(v.shape)}: drop the batch dimension (a micro-batch's "
            "sequences are packed into one token stream)")
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
        raise ValueError(
            f"q has {q.shape[0]} tokens but k has {k.shape[0]} and v "
            f"{v.shape[0]}; dcp_torch.attention is self-attention over the "
            "micro-batch's tokens: give k and v one row per token of q")


def _varlen(q, k, v, cu_seqlens, causal, varlen_attn=None):
    """One FlashAttention varlen call over the packed sequences (no
    padding segment): q [T, H, D], k and v [T, Hkv, D], GQA heads as they
    are."""
    if varlen_attn is None:
        from torch.nn.attention.varlen import varlen_attn
    cu = torch.tensor(cu_seqlens, dtype=torch.int32, device=q.device)
    longest = max(b - a for a, b in zip(cu_seqlens, cu_seqlens[1:]))
    return varlen_attn(q.contiguous(), k.contiguous(), v.contiguous(), cu,
                       cu, longest, longest,
                       window_size=(-1, 0) if causal else (-1, -1))


def _one_sequence(q, k, v, causal, kernel, repeat, core):
    """Attention of one sequence's q [L, H, D], k and v [L, Hkv, D]."""
    q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # [heads, L, D]
    if kernel is not AttentionKernel.SDPA_GQA and repeat > 1:
        k = k.repeat_interleave(repeat, dim=0)
        v = v.repeat_interleave(repeat, dim=0)
    if kernel is AttentionKernel.CORE:
        return core(q, k, v, causal).transpose(0, 1)
    out = F.scaled_dot_product_attention(
        q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), is_causal=causal,
        enable_gqa=repeat > 1 and kernel is AttentionKernel.SDPA_GQA)
    return out.squeeze(0).transpose(0, 1)


def packed_attention(q, k, v, cu_seqlens, causal, padded=False, core=None,
                     kernel=None, varlen_attn=None):
    """Attention over packed sequences in one process: q [T, H, D], k and v
    [T, Hkv, D] with Hkv dividing H (grouped-query attention), sequence s
    being tokens cu_seqlens[s]:cu_seqlens[s+1]. With `padded`, the last
    segment is padding: its output is zero. Returns [T, H, D].

    `kernel` (default attention_kernel.choose_kernel's): one varlen call on
    CUDA, else per sequence; `core` (if given) computes each sequence.
    `varlen_attn` replaces torch's varlen_attn (tests)."""
    heads, kv_heads = q.shape[1], k.shape[1]
    _check_token_counts(q, k, v)
    if kernel is None:
        kernel = choose_kernel(q.device.type, q.dtype, q.shape[2], heads,
                               kv_heads, has_core=core is not None)
    elif heads % kv_heads:
        raise ValueError(f"{kv_heads} key/value heads do not divide "
                         f"{heads} query heads")
    segments = len(cu_seqlens) - 1 - (1 if padded else 0)
    real = cu_seqlens[segments] if segments > 0 else 0
    outputs = []
    if real and kernel is AttentionKernel.VARLEN:
        outputs.append(_varlen(q[:real], k[:real], v[:real],
                               cu_seqlens[:segments + 1], causal, varlen_attn))
    else:
        for s in range(segments):
            start, end = cu_seqlens[s], cu_seqlens[s + 1]
            outputs.append(_one_sequence(q[start:end], k[start:end],
                                         v[start:end], causal, kernel,
                                         heads // kv_heads, core))
    if real < q.shape[0]:
        outputs.append(q.new_zeros((q.shape[0] - real,) + tuple(q.shape[1:])))
    return torch.cat(outputs, dim=0) if outputs else q.new_zeros(q.shape)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              causal: bool = True,
              core: Optional[Callable[[torch.Tensor, torch.Tensor,
                                       torch.Tensor, bool],
                                      torch.Tensor]] = None) -> torch.Tensor:
    """The drop-in attention of a model run by dcp_torch.

    q: [T, H, D], k and v: [T, Hkv, D] for this rank's T tokens of the
    running micro-batch (`with mb:`; or `with dcp_torch.packed(lengths):` in
    a single process). `causal` masks each sequence causally; False is full
    (bidirectional) attention within each sequence. `core(q, k, v, causal)`
    computes one sequence's attention on [heads, L, D] tensors (default:
    FlashAttention's varlen kernel over all sequences at once on CUDA in
    fp16/bf16, else torch's fused scaled_dot_product_attention per
    sequence; see dcp_torch.attention_kernel). Returns [T, H, D].

    Where the SP size does not divide Hkv, the KV heads are first repeated
    to lcm(Hkv, SP size) so that each rank gets whole heads (as the C++
    worker does; the planner prices the larger all-to-all and memory).

    HeadsNotDivisibleError when the SP size does not divide H."""
    packing = context.current()
    if packing is None:
        raise RuntimeError(
            "dcp_torch.attention ran outside a micro-batch: call the model "
            "inside `with mb:` (or `with dcp_torch.packed(lengths):`)")
    _check_token_counts(q, k, v)
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
