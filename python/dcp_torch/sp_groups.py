"""Sequence-parallel process groups, created lazily (when a plan or the
profile first needs them) with torch.distributed.new_group and cached per
process by member ranks. Not thread-safe: use from the training thread.

torch names a new group by a per-process counter, so every rank creates the
same groups in the same order: ensure() takes all of a plan's groups, which
every rank holds. A rank outside a group only counts it (new_group returns
at once, without communication), so creation costs only the members.
(new_group's use_local_synchronization, which would let members alone call
it, hangs in torch 2.11's Gloo when groups of different ranks are created in
different orders, as plans do.)"""

import datetime

import torch.distributed as dist

# Per process, not per SpGroups: the counter torch names groups by is too.
_GROUPS = {}


class SpGroups:
    def __init__(self, timeout_seconds=300.0):
        self._timeout = datetime.timedelta(seconds=timeout_seconds)
        self.created = 0

    def ensure(self, member_lists):
        """Creates the groups of these lists of global (torch) ranks that do
        not exist yet. Every rank must call it with the same lists in the
        same order."""
        for members in member_lists:
            key = tuple(sorted(members))
            if len(key) > 1 and key not in _GROUPS:
                _GROUPS[key] = dist.new_group(list(key), timeout=self._timeout)
                self.created += 1

    def get(self, members):
        """The group of these ranks (created by ensure), which must include
        this rank; None for a single rank (no communication needed)."""
        key = tuple(sorted(members))
        if len(key) == 1:
            return None
        if dist.get_rank() not in key:
            raise ValueError(f"rank {dist.get_rank()} asked for the SP group "
                             f"{list(key)} it is not a member of")
        if key not in _GROUPS:
            raise KeyError(f"the SP group {list(key)} was not created; call "
                           "ensure() with every group first, on every rank")
        return _GROUPS[key]
