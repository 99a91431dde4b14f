"""The micro-batch a rank is running now, as the attention function and the
checkpointed blocks see it. One per thread (a contextvars.ContextVar), set by
`with mb:` (runtime.MicroBatch) or by `packed(...)` for single-process use."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time
from typing import ContextManager, Iterable

import torch


@dataclasses.dataclass
class Packing:
    """How the tokens of one micro-batch are laid out.

    The micro-batch's sequences are concatenated into one stream, padded at
    the end to a multiple of the SP size; member k of the SP group holds the
    k-th of `sp_size` equal contiguous chunks. `cu_seqlens` are the sequence
    boundaries in the full padded stream (the padding, if any, is its last
    segment and `padded` says so; padded tokens attend nothing and nothing
    attends them). `group` is the SP process group (None at SP 1)."""
    cu_seqlens: list
    padded: bool = False
    sp_size: int = 1
    group: object = None
    checkpointed_layers: int = 0
    # Seconds spent in the all-to-alls (forward and backward), accumulated.
    communication_seconds: float = 0.0
    synchronize: object = None  # e.g. torch.cuda.synchronize, for timers

    def add_communication(self, seconds):
        self.communication_seconds += seconds


_current = contextvars.ContextVar("dcp_torch_packing", default=None)


def current():
    """The Packing of the running micro-batch, or None outside one."""
    return _current.get()


@contextlib.contextmanager
def active(packing):
    token = _current.set(packing)
    try:
        yield packing
    finally:
        _current.reset(token)


def packed(lengths: Iterable[int]) -> ContextManager[Packing]:
    """Runs dcp_torch.attention over tokens packed from sequences of these
    lengths in one process (no SP, no padding): `with dcp_torch.packed([5,
    9]): model(tokens_of_both)`."""
    cu = [0]
    for length in lengths:
        cu.append(cu[-1] + int(length))
    return active(Packing(cu_seqlens=cu))


class Timer:
    """Wall seconds of a block (after synchronize(), when given)."""

    def __init__(self, synchronize=None):
        self._synchronize = synchronize
        self.seconds = 0.0

    def __enter__(self):
        if self._synchronize:
            self._synchronize()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self._synchronize:
            self._synchronize()
        self.seconds = time.perf_counter() - self._start
        return False


def device_synchronizer(device):
    """torch.cuda.synchronize for a CUDA device, else None."""
    if torch.device(device).type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return None
