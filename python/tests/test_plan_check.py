"""What every rank checks of a plan before it runs it (no processes): the
same check on every rank, so all of them stop at the same step."""

import pytest

import dcp_torch
from dcp_torch._proto import plan_pb2
from dcp_torch.runtime import _check_plan

SPEC = dcp_torch.model_spec(num_layers=2, hidden_size=48,
                            num_attention_heads=6, num_kv_heads=2,
                            ffn_hidden_size=96)


def _plan(*groups):
    """groups: (ranks, [sequence indices per micro-batch])."""
    return plan_pb2.Plan(step=3, groups=[
        plan_pb2.Group(ranks=ranks, sp_size=len(ranks), micro_batches=[
            plan_pb2.MicroBatch(sequence_indices=m) for m in micro])
        for ranks, micro in groups])


def test_a_plan_that_partitions_ranks_and_samples_passes():
    _check_plan(_plan(([0, 1], [[0, 2]]), ([2], [[1]]), ([3], [])),
                num_samples=3, world_size=4, step=3, spec=SPEC)


def test_an_sp_size_that_cannot_split_the_heads_is_refused():
    with pytest.raises(dcp_torch.HeadsNotDivisibleError) as error:
        _check_plan(_plan(([0, 1, 2, 3], [[0, 1]])), num_samples=2,
                    world_size=4, step=3, spec=SPEC)
    message = str(error.value)
    assert "the plan of step 3 runs an SP group of 4 ranks, which cannot " \
        "split the model's 6 attention heads and 2 key/value heads" in message
    assert "dcp_torch.write_model_file" in message


@pytest.mark.parametrize("groups, samples, what", [
    ((([0, 1], [[0]]), ([1], [[1]])), 2, "puts rank 1 in two groups"),
    ((([0, 4], [[0]]),), 1, "puts rank 4 in two groups or outside"),
    ((([0], [[0, 1]]), ([1], [[1]])), 2, "exactly once"),
    ((([0], [[0]]),), 2, "exactly once"),
])
def test_a_plan_that_breaks_the_partition_is_a_divergence(groups, samples,
                                                          what):
    with pytest.raises(dcp_torch.RankDivergedError, match=what):
        _check_plan(_plan(*groups), num_samples=samples, world_size=4,
                    step=3, spec=SPEC)


def _phases(*phases):
    """phases: the groups of each, as for _plan."""
    return plan_pb2.Plan(step=3, phases=[
        plan_pb2.Phase(groups=_plan(*groups).groups) for groups in phases])


def test_a_plan_of_phases_partitions_each_phase_and_the_samples_overall():
    _check_plan(_phases([([0, 1], [[0]]), ([2], [[1]])],
                        [([0], [[2]]), ([1, 2], [[3]]), ([3], [])]),
                num_samples=4, world_size=4, step=3, spec=SPEC)


@pytest.mark.parametrize("plan, what", [
    (_phases([([0, 1], [[0]])], [([1], [[1]]), ([1, 2], [])]),
     "puts rank 1 in two groups"),
    (_phases([([0], [[0]])], [([1], [[0, 1]])]), "exactly once"),
    (plan_pb2.Plan(step=3, groups=_plan(([0], [[0]])).groups,
                   phases=_phases([([1], [[1]])]).phases),
     "both phases and groups"),
])
def test_a_plan_of_phases_that_breaks_the_partition_is_a_divergence(plan,
                                                                    what):
    with pytest.raises(dcp_torch.RankDivergedError, match=what):
        _check_plan(plan, num_samples=2, world_size=4, step=3, spec=SPEC)
