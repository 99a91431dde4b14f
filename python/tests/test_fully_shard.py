"""Training a model wrapped in torch.distributed.fsdp.fully_shard (ZeRO-3)
under dcp_torch on 4 Gloo processes: SP groups inside the sharded
data-parallel world, groups with different micro-batch counts, ranks with
none, recompute, a plan that re-groups the ranks within the step. Every step's gradient (gathered from its shards) equals the
single-process reference's in fp64, and the real planner accepts a
fully-sharded model's declaration ("zero3"), profiles it and plans for it
with ZeRO-3's memory and collectives."""

import torch
from torch.distributed.fsdp import fully_shard

import dcp_torch
from dcp_torch import sharding
from dcp_torch.local_planner import LocalPlanner
from fake_planner import phased_plan, plan
from test_gradient_equivalence import (LLAMA_SPEC, SHORT, build, fetch_of,
                                       reference_grads, train_step)
from test_scripted_plans import scripted_steps

ALL = list(range(len(SHORT)))
# (ranks, [(sequence indices, checkpointed layers) per micro-batch]) per
# group: 2, 1 and 3 micro-batches; one SP 4 group that recomputes both
# layers; a group with everything beside two ranks with nothing.
PLANS = [
    plan(0, ([0, 1], [([0, 1, 2], 1), ([3], 0)]), ([2], [([4, 5], 0)]),
         ([3], [([6], 0), ([7], 2)])),
    plan(1, ([0], [([0], 0), ([1, 2], 1), ([3], 0)]), ([1], [([4], 0)]),
         ([2, 3], [([5, 6, 7], 1)])),
    plan(2, ([0, 1, 2, 3], [(ALL, 2)])),
    plan(3, ([0, 1], [(ALL, 0)]), ([2], []), ([3], [])),
    # Re-grouping within the step: SP 4 for the longest, then 2+1+1.
    phased_plan(4, [([0, 1, 2, 3], [([4], 1)])],
                [([0, 1], [([0, 1], 0), ([2], 0)]), ([2], [([3, 5], 2)]),
                 ([3], [([6, 7], 0)])]),
]


def sharded_llama(dtype=torch.float64):
    model = build("llama", dcp_torch.attention).to(dtype)
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    return model


def train_fully_sharded(rank, world_size):
    grads, passes = [], []
    model = sharded_llama()
    for runtime, _, step in scripted_steps(model, rank, world_size, PLANS,
                                           "sharded"):
        passes.append((len(step), sum(m.counts for m in step)))
        # full_tensor gathers the shards: every rank, in the same order.
        grads.append({n: p.grad.full_tensor().clone()
                      for n, p in model.named_parameters()})
    return grads, passes, runtime.fully_sharded


def test_fully_sharded_training_keeps_the_reference_gradients(ranks4):
    results = ranks4.run(train_fully_sharded)
    expected = reference_grads("llama", SHORT)
    for rank, (grads, passes, fully_sharded) in enumerate(results):
        assert fully_sharded
        for step, step_grads in enumerate(grads):
            for name, grad in expected.items():
                torch.testing.assert_close(
                    step_grads[name], grad, rtol=1e-9, atol=1e-12,
                    msg=f"rank {rank} step {step} {name}")
    # Every rank ran as many passes as the busiest group of each layout
    # (2, 3, 1, 1, then 1 + 2); the rest of its passes were padding.
    steps = range(len(PLANS))
    counted = [[passes[s][1] for _, passes, _ in results] for s in steps]
    assert [[passes[s][0] for _, passes, _ in results] for s in steps] == \
        [[2] * 4, [3] * 4, [1] * 4, [1] * 4, [3] * 4]
    assert counted == [[2, 2, 1, 2], [3, 1, 1, 1], [1] * 4, [1, 1, 0, 0],
                       [3, 3, 2, 2]]


def declare_and_train(rank, world_size, address):
    model = sharded_llama(torch.float32)
    runtime = dcp_torch.init(model, model.layers, address, spec=LLAMA_SPEC,
                             worker_id=f"zero3-rank{rank}",
                             node_name=f"node{rank // 2}", profile=True,
                             log=lambda message: None)
    declared = runtime._training_state()
    planned_sharded = \
        runtime.client.get_cluster_model().params.memory.zero3_parameter_sharding
    losses = 0
    for step in runtime.steps([list(enumerate(SHORT))],
                              fetch_of("llama", SHORT)):
        train_step(model, step)
        losses += sum(m.loss_tokens for m in step)
        shape = [len(g.micro_batches) for g in step.plan.groups]
        ran = len(step)
    runtime.close()
    return declared, planned_sharded, losses, shape, ran


def test_the_planner_plans_for_a_fully_sharded_model(ranks4):
    with LocalPlanner(LLAMA_SPEC, nodes=2, gpus_per_node=2,
                      rank_memory_bytes=1e9) as planner:
        results = ranks4.run(declare_and_train, planner.address)
    for declared, planned_sharded, _, shape, ran in results:
        # The spec's dtype (bf16) and fully_shard's sharding.
        assert declared == {"precision": "bf16", "optimizer_sharding": "zero3"}
        assert planned_sharded
        assert ran == max(shape, default=0)
    # Every token of the batch counted once, over the ranks.
    assert sum(result[2] for result in results) == sum(SHORT)


def test_a_plain_model_is_not_fully_sharded():
    model = build("llama", dcp_torch.attention)
    assert not sharding.is_fully_sharded(model)
    assert sharding.micro_batches_per_rank(PLANS[1].groups) == 3
    assert sharding.micro_batches_per_rank(plan(5).groups) == 0
