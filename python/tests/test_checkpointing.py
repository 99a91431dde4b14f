import torch

import models
from dcp_torch import context
from dcp_torch.checkpointing import apply_checkpointing


class CountingBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.forward_calls = 0

    def forward(self, x):
        self.forward_calls += 1
        return torch.tanh(self.linear(x))


def _run(blocks, checkpointed_layers):
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0),
                    dtype=torch.float64)
    packing = context.Packing(cu_seqlens=[0, 3],
                              checkpointed_layers=checkpointed_layers)
    with context.active(packing):
        for block in blocks:
            x = block(x)
        x.sum().backward()
    return [b.linear.weight.grad.clone() for b in blocks]


def _blocks():
    torch.manual_seed(0)
    blocks = [CountingBlock().double() for _ in range(3)]
    apply_checkpointing(blocks)
    apply_checkpointing(blocks)  # a second call wraps nothing twice
    return blocks


def test_the_first_k_blocks_are_recomputed_and_gradients_unchanged():
    plain = _blocks()
    expected = _run(plain, checkpointed_layers=0)
    assert [b.forward_calls for b in plain] == [1, 1, 1]
    recomputed = _blocks()
    got = _run(recomputed, checkpointed_layers=2)
    assert [b.forward_calls for b in recomputed] == [2, 2, 1]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_recompute_of_attention_blocks_sees_the_forward_packing():
    # A Llama block under checkpointing calls dcp_torch.attention again in
    # backward, outside `with`: it must still find its micro-batch.
    import dcp_torch
    torch.manual_seed(0)
    model = models.Llama(attention=dcp_torch.attention).double()
    apply_checkpointing(model.layers)
    ids = torch.randint(0, 64, (12,))
    positions = torch.cat([torch.arange(5), torch.arange(7)])
    packing = context.Packing(cu_seqlens=[0, 5, 12], checkpointed_layers=2)
    with context.active(packing):
        logits = model(ids, positions)
    logits.sum().backward()  # recompute runs here, with no packing active
    assert model.layers[0].wq.weight.grad is not None
