"""The key test: one training step of a Llama-style and a DiT-style model
under very different plans from a real dcp_planner (SP 1 everywhere; SP 2+1+1
with accumulation and recompute; SP 4 with recompute; SP 2+2; groups and
ranks with no micro-batch) on 4 Gloo processes gives the gradients of a
single-process reference that runs each sequence alone with a naive
attention, in fp64."""

import pytest
import torch

import dcp_torch
import models
from dcp_torch.local_planner import LocalPlanner
from dcp_torch.step import plan_layouts

LLAMA_SPEC = dcp_torch.model_spec(
    name="test-llama", num_layers=2, hidden_size=32, num_attention_heads=8,
    num_kv_heads=4, ffn_hidden_size=64, vocab_size=64)
DIT_SPEC = dcp_torch.model_spec(
    name="test-dit", num_layers=2, hidden_size=32, num_attention_heads=4,
    num_kv_heads=4, ffn_hidden_size=64, vocab_size=0, causal=False,
    gated_mlp=False, adaln_modulation=True)

SHORT = [5, 9, 17, 33, 64, 3, 40, 12]
LONG = [7, 150, 23, 61, 11, 96, 5, 30]
TWO = [30, 4]

# (model, per-rank memory the planner may use, batch lengths): each makes
# the planner choose a different shape of plan (see the test's assertions).
CASES = [
    ("llama", 1e9, SHORT),
    ("llama", 4e5, LONG),
    ("llama", 3.5e5, LONG),
    ("llama", 3.5e5, SHORT),
    ("llama", 1e9, TWO),
    ("dit", 4e5, SHORT),
    ("dit", 4e5, LONG),
]


def build(kind, attention):
    torch.manual_seed(0)
    if kind == "llama":
        model = models.Llama(attention=attention)
    else:
        model = models.DiT(attention=attention)
    return model.double()


def fetch_of(kind, lengths):
    def fetch(sample_id):
        if kind == "llama":
            return models.llama_sample(sample_id, lengths[sample_id])
        return models.dit_sample(sample_id, lengths[sample_id])
    return fetch


def reference_grads(kind, lengths):
    model = build(kind, models.naive_attention)
    fetch = fetch_of(kind, lengths)
    total = 0
    for sample_id, length in enumerate(lengths):
        inputs = dict(fetch(sample_id))
        inputs["position_ids"] = torch.arange(length)
        inputs["sequence_index"] = torch.zeros(length, dtype=torch.int64)
        if "t" in inputs:
            inputs["t"] = inputs["t"].reshape(1)
        model.per_token_loss(inputs).sum().backward()
        total += length
    return {name: p.grad / total for name, p in model.named_parameters()}


def train_step(model, step):
    """This rank's micro-batches of `step` (loss per token over the global
    batch), the gradient sync and the step report."""
    for mb in step:
        with mb:
            loss = mb.token_loss_sum(model.per_token_loss(mb.inputs))
            (loss * step.loss_scale).backward()
    step.sync_gradients()
    step.report()


def train_one_step(rank, world_size, kind, address, case):
    lengths = CASES[case][2]
    model = build(kind, dcp_torch.attention)
    # The ModelSpec is read from the module (init's default for the Llama;
    # nothing in the DiT's blocks says they are bidirectional), and
    # registration checks it against the planner's.
    spec = None if kind == "llama" else dcp_torch.model_spec_from_module(
        model, model.layers, causal=False)
    runtime = dcp_torch.init(model, model.layers, address, spec=spec,
                             worker_id=f"case{case}-rank{rank}",
                             node_name=f"node{rank // 2}", profile=False,
                             log=lambda message: None)
    shape = None
    for step in runtime.steps([list(enumerate(lengths))],
                              fetch_of(kind, lengths)):
        train_step(model, step)
        # Every group of every layout (a plan that re-groups the ranks
        # within the step has several).
        shape = [(g.sp_size, [(len(m.sequence_indices), m.checkpointed_layers)
                              for m in g.micro_batches])
                 for layout in plan_layouts(step.plan) for g in layout]
        ran = len(step)
    runtime.close()
    return ({name: p.grad for name, p in model.named_parameters()}, shape,
            ran, runtime.reporter.sent)


@pytest.fixture(scope="module")
def results(ranks4):
    out = []
    for case, (kind, memory, lengths) in enumerate(CASES):
        spec = LLAMA_SPEC if kind == "llama" else DIT_SPEC
        with LocalPlanner(spec, nodes=2, gpus_per_node=2,
                          rank_memory_bytes=memory) as planner:
            out.append(ranks4.run(train_one_step, kind, planner.address,
                                  case))
    return out


@pytest.mark.parametrize("case", range(len(CASES)))
def test_gradients_equal_the_single_process_reference(results, case):
    kind, _, lengths = CASES[case]
    expected = reference_grads(kind, lengths)
    worst = 0.0
    for rank, (grads, _, _, reports) in enumerate(results[case]):
        assert reports == 1, f"rank {rank} sent {reports} step reports"
        for name, grad in expected.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-9,
                                       atol=1e-12,
                                       msg=f"case {case} rank {rank} {name}")
            worst = max(worst, ((grads[name] - grad).abs().max()
                                / grad.abs().max()).item())
    print(f"case {case} ({kind}): max |grad - reference| / max |reference| "
          f"= {worst:.1e} over 4 ranks")


def test_the_plans_are_very_different(results):
    shapes = [r[0][1] for r in results]
    print("plans (sp size, [(sequences, checkpointed layers)] per group):")
    for case, shape in enumerate(shapes):
        print(f"  {CASES[case][0]} {CASES[case][1]:.2g}: {shape}")
    sp_sizes = {sp for shape in shapes for sp, _ in shape}
    assert {1, 2, 4} <= sp_sizes
    # A plan that recomputes layers, one with gradient accumulation (a group
    # of several micro-batches), one where a group of ranks gets nothing.
    assert any(c > 0 for shape in shapes for _, m in shape for _, c in m)
    assert any(len(m) > 1 for shape in shapes for _, m in shape)
    assert any(len(m) == 0 for shape in shapes for _, m in shape)
    # All four ranks agree on what they ran: somewhere a rank ran nothing.
    assert any(r[2] == 0 for case in results for r in case)
