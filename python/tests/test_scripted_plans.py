"""Training under scripted plans whose SP groups change every step (a fake
planner serves them), with at most one SP group cached per rank: every step
still gives the single-process reference's gradients on every rank, and each
rank creates only its own groups, again after the bound released them; the
same for plans that re-group the ranks within the step (phases)."""

import torch

import dcp_torch
from fake_planner import FakePlannerClient, phased_plan, plan
from test_gradient_equivalence import (LLAMA_SPEC, SHORT, build, fetch_of,
                                       reference_grads, train_step)

ALL = list(range(len(SHORT)))
PLANS = [
    plan(0, ([0, 1], [([0, 1, 2], 1), ([3], 0)]),
         ([2, 3], [([4, 5, 6, 7], 0)])),
    plan(1, ([0, 2], [([4], 2), ([0, 1], 0)]),
         ([1, 3], [([2, 3, 5, 6, 7], 0)])),
    plan(2, ([0, 1], [(ALL, 0)]), ([2], []), ([3], [])),
    plan(3, ([0, 1, 2, 3], [([0, 1, 2, 3], 2), ([4, 5, 6, 7], 0)])),
    plan(4, ([0, 1], [([7], 0)]), ([2, 3], [([0, 1, 2, 3, 4, 5, 6], 1)])),
]


def scripted_steps(model, rank, world_size, plans, name, **init_options):
    """Trains `model` on this rank one step of SHORT per plan, the plans
    served by a fake planner: yields (runtime, client, step) after each
    step's backward and gradient sync, zeroes the gradients after it, and
    closes the runtime at the end."""
    client = FakePlannerClient(LLAMA_SPEC, world_size, plans)
    runtime = dcp_torch.init(model, model.layers, spec=LLAMA_SPEC,
                             worker_id=f"{name}-rank{rank}", profile=False,
                             client=client, log=lambda message: None,
                             **init_options)
    batch = list(enumerate(SHORT))
    for step in runtime.steps([batch] * len(plans), fetch_of("llama", SHORT)):
        train_step(model, step)
        yield runtime, client, step
        model.zero_grad(set_to_none=True)
    runtime.close()


def train_scripted(rank, world_size):
    grads, held = [], []
    model = build("llama", dcp_torch.attention)
    for runtime, client, _ in scripted_steps(model, rank, world_size, PLANS,
                                             "scripted", max_cached_groups=1):
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        held.append(runtime.sp_groups.held)
    creations = [name.rsplit("/", 1)[1]
                 for name in runtime.sp_groups.creations]
    return grads, held, creations, client.reports, client.submitted_steps


def test_changing_groups_under_a_bound_keep_the_reference_gradients(ranks4):
    results = ranks4.run(train_scripted)
    expected = reference_grads("llama", SHORT)
    pairs = {0: ("0_1", "0_2"), 1: ("0_1", "1_3"), 2: ("2_3", "0_2"),
             3: ("2_3", "1_3")}
    for rank, (grads, held, creations, reports, submitted) in \
            enumerate(results):
        for step, step_grads in enumerate(grads):
            for name, grad in expected.items():
                torch.testing.assert_close(
                    step_grads[name], grad, rtol=1e-9, atol=1e-12,
                    msg=f"rank {rank} step {step} {name}")
        # Step 2 releases 0_2 and 1_3 for ranks 0 and 1 (now in 0_1): ranks
        # 2 and 3 release them alike and hold nothing until 2_3 is back.
        assert held == ([1] * 5 if rank < 2 else [1, 1, 0, 0, 1]), \
            (rank, held)
        first, second = pairs[rank]
        # Released at the step after next, created again under #1.
        assert creations == [f"{first}#0", f"{second}#0", f"{first}#1"], \
            (rank, creations)
        assert reports == [0, 1, 2, 3, 4]
        assert submitted == ([0, 1, 2, 3, 4] if rank == 0 else [])


PHASED = [
    # SP 4 for the longest sequence, then 2+1+1 for the rest.
    phased_plan(0, [([0, 1, 2, 3], [([4], 1)])],
                [([0, 1], [([0, 1], 0), ([2], 0)]), ([2], [([3, 5], 2)]),
                 ([3], [([6, 7], 0)])]),
    # Three phases; ranks 2 and 3 idle in the second.
    phased_plan(1, [([0, 1], [([7], 0)]), ([2, 3], [([6], 0)])],
                [([0, 1], [([0, 1, 2], 1)]), ([2], []), ([3], [])],
                [([0], [([3], 0)]), ([1], [([4], 0)]), ([2, 3], [([5], 2)])]),
]


def train_phased(rank, world_size):
    grads, ran = [], []
    model = build("llama", dcp_torch.attention)
    for _, _, step in scripted_steps(model, rank, world_size, PHASED,
                                     "phased"):
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        ran.append([m.index for m in step])
    return grads, ran


def test_plans_that_regroup_within_the_step_keep_the_reference_gradients(
        ranks4):
    results = ranks4.run(train_phased)
    expected = reference_grads("llama", SHORT)
    for rank, (grads, _) in enumerate(results):
        for step, step_grads in enumerate(grads):
            for name, grad in expected.items():
                torch.testing.assert_close(
                    step_grads[name], grad, rtol=1e-9, atol=1e-12,
                    msg=f"rank {rank} step {step} {name}")
    # Each rank's micro-batches, numbered phase after phase.
    assert [ran for _, ran in results] == [
        [[0, 1, 2], [0, 1, 2]], [[0, 1, 2], [0, 1, 2]],
        [[0, 1], [0, 1]], [[0, 1], [0, 1]]]
