import math

import pytest
import torch

from dcp_torch import attention_kernel, context, ulysses
import models

LENGTHS = [5, 11, 2, 7]  # 25 tokens: not divisible by 2 or 4


def _inputs(total, heads, kv_heads, dim=3):
    generator = torch.Generator().manual_seed(7)
    make = lambda h: torch.randn(total, h, dim, generator=generator,  # noqa
                                 dtype=torch.float64)
    return make(heads), make(kv_heads), make(kv_heads), make(heads)


def _reference(causal, heads, kv_heads):
    """Naive per-sequence softmax attention, written out, and its grads."""
    q, k, v, w = _inputs(sum(LENGTHS), heads, kv_heads)
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out, start = [], 0
    for length in LENGTHS:
        qs, ks, vs = (t[start:start + length] for t in (q, k, v))
        ks = ks.repeat_interleave(heads // kv_heads, dim=1)
        vs = vs.repeat_interleave(heads // kv_heads, dim=1)
        scores = torch.einsum("ihd,jhd->hij", qs, ks) / math.sqrt(q.shape[2])
        if causal:
            mask = torch.ones(length, length, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        out.append(torch.einsum("hij,jhd->ihd", scores.softmax(-1), vs))
        start += length
    out = torch.cat(out)
    (out * w).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad


def _sharded(rank, world_size, causal, heads, kv_heads):
    total = sum(LENGTHS)
    chunk = -(-total // world_size)
    padded_total = chunk * world_size
    q, k, v, w = (torch.nn.functional.pad(t, (0, 0, 0, 0, 0,
                                              padded_total - total))
                  for t in _inputs(total, heads, kv_heads))
    mine = slice(rank * chunk, (rank + 1) * chunk)
    q, k, v = (t[mine].clone().requires_grad_() for t in (q, k, v))
    cu = [0]
    for length in LENGTHS:
        cu.append(cu[-1] + length)
    cu.append(padded_total)
    packing = context.Packing(cu_seqlens=cu, padded=True, sp_size=world_size,
                              group=torch.distributed.group.WORLD)
    with context.active(packing):
        out = ulysses.attention(q, k, v, causal=causal)
        (out * w[mine]).sum().backward()
    assert packing.communication_seconds > 0
    return out.detach(), q.grad, k.grad, v.grad


# (8, 2): SP 4 is beyond the 2 KV heads, which are repeated to 4.
@pytest.mark.parametrize("heads,kv_heads", [(8, 4), (8, 2)])
@pytest.mark.parametrize("causal", [True, False])
def test_sp4_attention_and_grads_equal_the_naive_reference(causal, heads,
                                                           kv_heads, ranks4):
    expected = _reference(causal, heads, kv_heads)
    results = ranks4.run(_sharded, causal, heads, kv_heads)
    total = sum(LENGTHS)
    for index, name in enumerate(["out", "dq", "dk", "dv"]):
        got = torch.cat([r[index] for r in results])[:total]
        torch.testing.assert_close(got, expected[index], rtol=1e-12,
                                   atol=1e-12, msg=name)
        # Padding gets zero output and zero gradient.
        assert torch.all(torch.cat([r[index] for r in results])[total:] == 0)


def test_packed_without_sp_equals_reference():
    q, k, v, _ = _inputs(sum(LENGTHS), 4, 2)
    with context.packed(LENGTHS):
        out = ulysses.attention(q, k, v, causal=True)
    expected = _reference(True, 4, 2)[0]
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_heads_not_divisible_by_sp_is_a_clear_error():
    q = torch.zeros(4, 6, 2)
    packing = context.Packing(cu_seqlens=[0, 16], sp_size=4, group=object())
    with context.active(packing), pytest.raises(
            ulysses.HeadsNotDivisibleError, match="SP size 4.*6 attention"):
        ulysses.attention(q, q, q)


def test_attention_outside_a_micro_batch_says_what_to_do():
    q = torch.zeros(4, 2, 2)
    with pytest.raises(RuntimeError, match="inside `with mb:`"):
        ulysses.attention(q, q, q)


# --- the kernel: fused on every shape the planner plans -------------------

# (heads, kv_heads, head_dim) of the planner's presets (cost_model/
# model_spec.cc: llama3-8b, llama3-70b, video-dit-1b, tiny) and of the
# tests' models.
PLANNER_MODELS = [(32, 8, 128), (64, 8, 128), (16, 16, 72), (4, 2, 16),
                  (8, 4, 4)]


def _per_rank_heads(heads, kv_heads):
    """(query heads, kv heads) per rank at every SP size dividing heads."""
    shapes, sp = [], 1
    while sp <= heads:
        if heads % sp == 0:
            copies = sp // math.gcd(kv_heads, sp)
            shapes.append((heads // sp, kv_heads * copies // sp))
        sp *= 2
    return shapes


@pytest.mark.parametrize("heads,kv_heads,head_dim", PLANNER_MODELS)
def test_cuda_picks_a_fused_kernel_for_every_planned_shape(heads, kv_heads,
                                                           head_dim):
    if head_dim % 8:
        pytest.skip("a CPU-test model; its head_dim fits no GPU kernel")
    for q_heads, k_heads in _per_rank_heads(heads, kv_heads):
        for dtype, expected in ((torch.bfloat16, ulysses.AttentionKernel.VARLEN),
                                (torch.float16, ulysses.AttentionKernel.VARLEN),
                                (torch.float32,
                                 ulysses.AttentionKernel.SDPA_REPEATED_KV)):
            kernel = attention_kernel.choose_kernel(
                "cuda", dtype, head_dim, q_heads, k_heads, has_varlen=True)
            assert kernel is expected, (q_heads, k_heads, dtype)
            assert attention_kernel.fused_on_cuda(kernel, dtype, head_dim)
        # A torch without varlen_attn: 4-D SDPA with GQA (flash).
        kernel = attention_kernel.choose_kernel(
            "cuda", torch.bfloat16, head_dim, q_heads, k_heads,
            has_varlen=False)
        assert kernel is ulysses.AttentionKernel.SDPA_GQA
        assert attention_kernel.fused_on_cuda(kernel, torch.bfloat16, head_dim)
        assert attention_kernel.choose_kernel(
            "cpu", torch.float32, head_dim, q_heads, k_heads) is \
            ulysses.AttentionKernel.SDPA_GQA
        assert attention_kernel.choose_kernel(
            "cuda", torch.bfloat16, head_dim, q_heads, k_heads,
            has_core=True) is ulysses.AttentionKernel.CORE


def test_a_head_dim_beyond_flash_falls_back_to_the_mem_efficient_kernel():
    kernel = attention_kernel.choose_kernel("cuda", torch.bfloat16, 320, 8,
                                            8, has_varlen=True)
    assert kernel is ulysses.AttentionKernel.SDPA_REPEATED_KV
    assert attention_kernel.fused_on_cuda(kernel, torch.bfloat16, 320)
    assert not attention_kernel.fused_on_cuda(
        ulysses.AttentionKernel.SDPA_REPEATED_KV, torch.float32, 6)


def test_every_sdpa_call_on_cpu_gets_a_fused_backend(monkeypatch):
    """3-D inputs went to MATH (full L x L scores); 4-D ones reach flash."""
    from torch.nn.attention import SDPBackend
    real = torch.nn.functional.scaled_dot_product_attention
    choices = []

    def recording(q, k, v, is_causal=False, enable_gqa=False, **kwargs):
        choices.append(SDPBackend(torch._fused_sdp_choice(
            q, k, v, is_causal=is_causal, enable_gqa=enable_gqa)))
        return real(q, k, v, is_causal=is_causal, enable_gqa=enable_gqa,
                    **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        recording)
    q, k, v, _ = _inputs(sum(LENGTHS), 4, 2)
    with context.packed(LENGTHS):
        out = ulysses.attention(q.float(), k.float(), v.float())
        ulysses.attention(q.float(), k.float(), v.float(),
                          core=ulysses.sdpa_core)
    assert len(choices) == 2 * len(LENGTHS)
    assert set(choices) == {SDPBackend.FLASH_ATTENTION}, choices
    torch.testing.assert_close(out, _reference(True, 4, 2)[0].float(),
                               rtol=1e-5, atol=1e-5)


def _reference_varlen(calls):
    """varlen_attn's contract, computed per sequence (and recorded)."""
    def varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, window_size):
        calls.append((cu_q.dtype, cu_q.tolist(), max_q, window_size,
                      q.shape[1], k.shape[1]))
        assert torch.equal(cu_q, cu_k) and max_q == max_k
        out = []
        for a, b in zip(cu_q.tolist(), cu_q.tolist()[1:]):
            out.append(models.naive_attention(q[a:b], k[a:b], v[a:b],
                                              causal=window_size == (-1, 0)))
        return torch.cat(out)
    return varlen_attn


@pytest.mark.parametrize("causal", [True, False])
def test_the_varlen_branch_equals_the_per_sequence_path(causal):
    """The CUDA branch's arguments (int32 cu_seqlens without the padding,
    the longest sequence, the causal window, GQA heads unrepeated) checked
    against varlen_attn's contract on CPU; padding gets zeros."""
    cu = [0, 5, 16, 18, 25, 28]  # 25 tokens and 3 of padding
    q, k, v, w = (torch.nn.functional.pad(t, (0, 0, 0, 0, 0, 3))
                  for t in _inputs(25, 8, 2))
    results = []
    calls = []
    for kernel in (ulysses.AttentionKernel.VARLEN,
                   ulysses.AttentionKernel.SDPA_GQA,
                   ulysses.AttentionKernel.SDPA_REPEATED_KV):
        qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
        out = ulysses.packed_attention(
            qs, ks, vs, cu, causal, padded=True, kernel=kernel,
            varlen_attn=_reference_varlen(calls))
        (out * w).sum().backward()
        results.append((out.detach(), qs.grad, ks.grad, vs.grad))
    assert calls == [(torch.int32, [0, 5, 16, 18, 25], 11,
                      (-1, 0) if causal else (-1, -1), 8, 2)]
    for other in results[1:]:
        for got, expected in zip(results[0], other):
            torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert torch.all(results[0][0][25:] == 0)
    assert torch.all(results[0][1][25:] == 0)


def test_k_and_v_with_another_token_count_than_q_are_refused():
    q = torch.zeros(6, 2, 4)
    with context.packed([6]), pytest.raises(
            ValueError, match="q has 6 tokens but k has 5 and v 5"):
        ulysses.attention(q, q[:5], q[:5])
    with context.packed([6]), pytest.raises(
            ValueError, match="q has 6 tokens but k has 6 and v 4; "
            "dcp_torch.attention is self-attention over the micro-batch's "
            "tokens: give k and v one row per token of q"):
        ulysses.attention(q, q, q[:4])
    # At SP > 1 the check comes before any all-to-all (no group needed).
    sp2 = context.Packing(cu_seqlens=[0, 6, 12], sp_size=2, group=None)
    with context.active(sp2), pytest.raises(
            ValueError, match="q has 6 tokens but k has 3 and v 3"):
        ulysses.attention(q, q[:3], q[:3])


def test_a_batch_dimension_is_refused_with_the_shapes():
    q = torch.zeros(1, 6, 2, 4)
    with context.packed([6]), pytest.raises(
            ValueError, match=r"takes q, k and v as \[tokens, heads, "
            r"head_dim\]; got q \[1, 6, 2, 4\], k \[1, 6, 2, 4\], v "
            r"\[1, 6, 2, 4\]: drop the batch dimension"):
        ulysses.attention(q, q, q)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("heads,kv_heads,head_dim", PLANNER_MODELS[:3])
def test_on_a_gpu_the_chosen_kernels_run_fused_and_agree(heads, kv_heads,
                                                         head_dim):
    from torch.nn.attention import SDPBackend
    lengths = [5, 300, 77, 1024]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    for q_heads, k_heads in _per_rank_heads(heads, kv_heads)[:3]:
        make = lambda h: torch.randn(cu[-1], h, head_dim, device="cuda",  # noqa
                                     dtype=torch.bfloat16)
        q, k, v = make(q_heads), make(k_heads), make(k_heads)
        one = q[:300].transpose(0, 1).unsqueeze(0)
        kv = k[:300].transpose(0, 1).unsqueeze(0)
        choice = SDPBackend(torch._fused_sdp_choice(
            one, kv, kv, is_causal=True, enable_gqa=q_heads != k_heads))
        assert choice != SDPBackend.MATH
        fused = ulysses.packed_attention(q, k, v, cu, True)
        per_sequence = ulysses.packed_attention(
            q, k, v, cu, True, kernel=ulysses.AttentionKernel.SDPA_GQA)
        torch.testing.assert_close(fused, per_sequence, rtol=2e-2, atol=2e-2)
