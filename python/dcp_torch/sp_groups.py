"""Sequence-parallel sub-groups, created lazily among their members only
and cached, with an optional bound on how many a rank keeps. Mirrors the C++
workers' C10dCommunicator (worker/communication/c10d_communicator.cc).

A group is a c10d ProcessGroup built here directly (ProcessGroupGloo on CPU,
ProcessGroupNCCL on CUDA) over a PrefixStore of the world's store, in a
namespace every member computes alike from the group's ranks and its
generation (how often it was released before), so only members take part in
creating it and a rank never waits on a group it is not in. The world (every
rank) is the default group, never created again; a single rank needs none.

Why not torch.distributed.new_group: without use_local_synchronization every
rank of the world must call it for every group; with it, torch 2.11 names
the group by a hash of its ranks *and the number of groups this process
already holds* (distributed_c10d._hash_ranks_to_str), so two members whose
plans gave them different numbers of groups before rendezvous in different
store namespaces and wait until their timeout. Plans do exactly that.

It leans on c10d hooks torch's own group code uses but does not document
(distributed_c10d._get_default_store, ProcessGroup._register_backend and
_set_default_backend) at the pinned torch 2.11; tests/test_sp_groups.py runs
them on Gloo.

Every rank calls use() with the same lists at the same point (a step's or
the profile's groups): the cache's history is then identical on every rank,
so all members of a group release it alike and create it again alike (under
a fresh namespace). Not thread-safe: use from the training thread."""

import datetime

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d


def _create_process_group(store, group_rank, group_size, timeout, backend,
                          ranks, name):
    """A ProcessGroup of `group_size` members over `store`, blocking until
    every member has joined (Gloo; NCCL connects at the first collective)."""
    group = dist.ProcessGroup(store, group_rank, group_size)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        options.global_ranks_in_group = list(ranks)
        options.group_name = name
        backend_object = dist.ProcessGroupNCCL(store, group_rank, group_size,
                                               options)
        device, kind = torch.device("cuda"), dist.ProcessGroup.BackendType.NCCL
    elif backend == "gloo":
        backend_object = dist.ProcessGroupGloo(store, group_rank, group_size,
                                               timeout)
        device, kind = torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO
    else:
        raise ValueError(f"SP groups need the gloo or nccl backend, not "
                         f"{backend!r}")
    group._register_backend(device, kind, backend_object)
    group._set_default_backend(kind)
    group._set_group_name(name)
    return group


class _History:
    """What every rank knows alike of one group (its own or not)."""

    def __init__(self):
        self.last_used = 0  # the use() call that last announced it
        self.live = False   # held by its members (announced, not released)
        self.generation = 0  # times released: names a fresh namespace


class SpGroups:
    """The SP groups of one process; see the module docstring.

    namespace: the store prefix of this object's groups; the same on every
      rank and distinct per SpGroups of one job (default: a per-process
      counter, alike on every rank when every rank creates its SpGroups at
      the same point, as dcp_torch.init does).
    max_cached_groups: the most sub-groups (the world not counted) any rank
      keeps; 0: no bound. Each is a communicator (Gloo sockets and threads;
      an NCCL one takes GPU memory).
    create: the group factory (tests pass one that records calls); default
      builds c10d groups over the world's store.
    backend: "gloo" or "nccl", from the device of the tensors the groups
      carry (devices.collective_backend), not from torch.distributed's
      backend string (which is "undefined" for a world initialized without
      naming one)."""

    _instances = 0

    def __init__(self, timeout_seconds=300.0, max_cached_groups=0,
                 namespace=None, create=None, backend="gloo"):
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"SpGroups backend={backend!r}; give \"gloo\" "
                             "(CPU tensors) or \"nccl\" (CUDA tensors): "
                             "dcp_torch.devices.collective_backend(device)")
        if max_cached_groups < 0:
            raise ValueError(f"max_cached_groups={max_cached_groups}; give 0 "
                             "(no bound) or the most groups a rank may keep")
        if namespace is None:
            namespace = f"dcp_torch/sp{SpGroups._instances}"
            SpGroups._instances += 1
        self._timeout = datetime.timedelta(seconds=timeout_seconds)
        self.max_cached_groups = max_cached_groups
        self.backend = backend
        self.namespace = namespace
        self._create = create or self._create_c10d
        self._groups = {}   # ranks (sorted tuple) -> this rank's group
        self._history = {}  # ranks -> _History, identical on every rank
        self._uses = 0
        # The namespaces of the groups this rank created, in order.
        self.creations = []

    @property
    def created(self):
        """Groups this rank created (one released and created again counts
        twice)."""
        return len(self.creations)

    @property
    def held(self):
        """Sub-groups this rank holds now."""
        return len(self._groups)

    def use(self, member_lists):
        """Announces the groups about to be used (lists of global torch
        ranks: all of a step's groups, every rank's, in the same order on
        every rank). Creates none; with a bound, releases the least recently
        used groups this call does not announce, while any rank would hold
        more than the bound."""
        self._uses += 1
        announced = set()
        for members in member_lists:
            key = self._key(members)
            if key is None:
                continue
            history = self._history.setdefault(key, _History())
            history.last_used = self._uses
            history.live = True
            announced.add(key)
        if not self.max_cached_groups:
            return
        ranks = sorted({r for key in self._history for r in key})
        for rank in ranks:  # the same decisions, in the same order, anywhere
            while True:
                live = [(history.last_used, key)
                        for key, history in self._history.items()
                        if history.live and rank in key]
                idle = sorted(entry for entry in live
                              if entry[1] not in announced)
                if len(live) <= self.max_cached_groups or not idle:
                    break
                self._release(idle[0][1])

    def get(self, members):
        """The group of these global ranks (which must include this rank and
        have been announced by use()), created among its members on first
        use; None for a single rank, the default group for the world."""
        key = self._key(members)
        me = dist.get_rank()
        if me not in tuple(sorted(int(r) for r in members)):
            raise ValueError(f"rank {me} asked for the SP group "
                             f"{sorted(members)}, which it is not a member of")
        if key is None:
            return None if len(set(members)) == 1 else dist.group.WORLD
        history = self._history.get(key)
        if history is None or not history.live:
            raise KeyError(f"the SP group {list(key)} was not announced; call "
                           "use() with every group of the step first, on "
                           "every rank")
        if key not in self._groups:
            name = self._name(key, history.generation)
            self._groups[key] = self._create(key, key.index(me), name)
            self.creations.append(name)
        return self._groups[key]

    def close(self):
        """Releases every group this rank holds."""
        for key in list(self._groups):
            self._drop(key)

    # --- internals ---------------------------------------------------------

    @staticmethod
    def _key(members):
        """The sorted ranks of a sub-group; None for one rank or the world."""
        key = tuple(sorted({int(r) for r in members}))
        if len(key) <= 1 or len(key) == dist.get_world_size():
            return None
        return key

    def _name(self, key, generation):
        return (f"{self.namespace}/{'_'.join(map(str, key))}"
                f"#{generation}")

    def _release(self, key):
        history = self._history[key]
        history.live = False
        history.generation += 1
        if key in self._groups:  # only where this rank held it
            self._drop(key)

    def _drop(self, key):
        group = self._groups.pop(key)
        shutdown = getattr(group, "shutdown", None)
        if shutdown is not None:
            try:
                shutdown()
            except RuntimeError:  # a backend without shutdown: dropped anyway
                pass

    def _create_c10d(self, key, group_rank, name):
        store = dist.PrefixStore(name + "/",
                                 distributed_c10d._get_default_store())
        return _create_process_group(store, group_rank, len(key),
                                     self._timeout, self.backend, key, name)
