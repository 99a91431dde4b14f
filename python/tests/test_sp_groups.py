"""SP sub-groups on 4 Gloo processes: created among their members only (a
rank never creates a group it is not in), cached across steps, and bounded,
with the plans' typical pattern of ranks holding different numbers of groups
before they share one (where torch.distributed.new_group with
use_local_synchronization names the group differently on each member)."""

import torch
import torch.distributed as dist

from dcp_torch.sp_groups import SpGroups

# A plan's groups per step (every rank's), as torch ranks.
STEPS = [
    [[0, 1], [2, 3]],
    [[0, 2], [1, 3]],
    [[1, 2], [0], [3]],        # ranks 1 and 2 now hold one group more
    [[0, 1, 2], [3]],          # ... than rank 0, with which they share this
    [[0, 1, 2, 3]],            # the world: the default group
    [[0, 1], [2, 3]],          # cached: nothing created
]


def _check_works(group, members):
    """A collective over the group: the sum of the members' ranks."""
    if group is None:
        return
    value = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(value, group=group)
    assert value.item() == float(sum(members)), (members, value.item())
    sent = torch.arange(len(members), dtype=torch.float64) + \
        10 * dist.get_rank()
    received = torch.empty_like(sent)
    dist.all_to_all_single(received, sent, group=group)
    position = members.index(dist.get_rank())
    assert received.tolist() == [10.0 * m + position for m in members]


def run_steps(rank, world_size, namespace, max_cached_groups, steps):
    groups = SpGroups(timeout_seconds=60, max_cached_groups=max_cached_groups,
                      namespace=namespace)
    objects, held = [], []
    for plan in steps:
        groups.use(plan)
        mine = next(g for g in plan if rank in g)
        group = groups.get(mine)
        _check_works(group, mine)
        objects.append(id(group) if group is not None else None)
        held.append(groups.held)
    creations = list(groups.creations)
    groups.close()
    dist.barrier()
    return creations, objects, held


def test_only_members_create_a_group_and_each_once(ranks4):
    results = ranks4.run(run_steps, "members", 0, STEPS)
    for rank, (creations, objects, held) in enumerate(results):
        expected = [f"members/{'_'.join(map(str, g))}#0"
                    for plan in STEPS[:5] for g in plan
                    if rank in g and 1 < len(g) < 4]
        assert creations == expected, (rank, creations)
        # Step 5 reuses step 0's group object; nothing is ever released.
        assert objects[5] == objects[0] is not None
        assert held == sorted(held) and held[-1] == len(expected)


# Each rank's pair changes back and forth: with a bound of 1 a rank keeps
# only its current group, and a group used again is created again, under a
# fresh namespace (#1), by both its members alike.
SWAPS = [[[0, 1], [2, 3]], [[0, 2], [1, 3]], [[0, 1], [2, 3]],
         [[0, 1], [2, 3]]]


def test_a_bound_releases_the_least_recently_used_alike(ranks4):
    results = ranks4.run(run_steps, "bounded", 1, SWAPS)
    partner = {0: (1, 2), 1: (0, 3), 2: (3, 0), 3: (2, 1)}
    for rank, (creations, objects, held) in enumerate(results):
        first, second = partner[rank]
        pair = lambda other: "_".join(map(str, sorted((rank, other))))  # noqa
        assert creations == [f"bounded/{pair(first)}#0",
                             f"bounded/{pair(second)}#0",
                             f"bounded/{pair(first)}#1"], (rank, creations)
        assert held == [1, 1, 1, 1]
        assert objects[3] == objects[2]


def asks_for_a_foreign_group(rank, world_size):
    groups = SpGroups(namespace="foreign")
    groups.use([[0, 1], [2, 3]])
    try:
        groups.get([2, 3] if rank < 2 else [0, 1])
    except ValueError as error:
        return str(error), groups.created
    return "no error", groups.created


def test_a_rank_asking_for_a_group_it_is_not_in_is_refused(ranks4):
    for rank, (message, created) in enumerate(ranks4.run(
            asks_for_a_foreign_group)):
        assert f"rank {rank} asked for the SP group" in message
        assert "not a member" in message
        assert created == 0
