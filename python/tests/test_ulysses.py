import math

import pytest
import torch

from dcp_torch import context, ulysses

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
