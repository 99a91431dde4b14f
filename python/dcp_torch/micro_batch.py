"""MicroBatch: one forward and backward pass of a rank's SP group, its
inputs packed and cut to this rank's share. Belongs to the training thread."""

from __future__ import annotations

import collections.abc
import dataclasses
import numbers
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

import torch

from dcp_torch import context


@dataclasses.dataclass
class _MicroStats:
    seconds: float = 0.0
    communication_seconds: float = 0.0


class IgnoredLabelsError(ValueError):
    """Integer labels of -100 (the ignore index) at tokens that count in the
    loss: step.loss_scale would divide by tokens that have no target."""


class MicroBatch:
    """One forward and backward pass of this rank's group: `with mb:` runs
    the model on `inputs` (this rank's share of the packed sequences) with
    the SP group, the checkpointed layers and the timers in effect.

    inputs: the token tensors of the micro-batch's samples concatenated and
      cut to this rank's chunk (padded with zeros at the stream's end), the
      per-sequence ones stacked, plus "position_ids" (each token's position
      in its sequence) and "sequence_index" (its sequence's index among the
      micro-batch's, for per-sequence conditioning). Padding has position 0
      and sequence 0; token_loss_sum masks it out.
    counts: False for a padding micro-batch (a rank of a model under
      fully_shard that has run its plan's micro-batches runs these until
      every rank has run as many): its loss counts nothing, so its gradient
      is zero, but its forward and backward join the all-gathers and
      reduce-scatters of the other ranks."""

    def __init__(self, step: Any, index: int, proto: Any,
                 samples: Sequence[Tuple[int, int]],
                 fetch: Callable[[int], Mapping[str, Any]],
                 sequence_keys: frozenset, sp_size: int, position: int,
                 group: Optional[Any], counts: bool = True) -> None:
        self.step = step
        self.index = index
        self.counts = counts
        self.checkpointed_layers = proto.checkpointed_layers
        self.samples = samples
        self.done = False
        self.stats = _MicroStats()
        device = step._runtime.device
        fetched = [_checked_sample(sample_id, fetch(sample_id))
                   for sample_id, _ in samples]
        lengths = [length for _, length in samples]
        total = sum(lengths)
        chunk = -(-total // sp_size)
        padded_total = chunk * sp_size
        mine = slice(position * chunk, (position + 1) * chunk)
        token_keys, per_sequence = _split_keys(fetched, lengths, sequence_keys,
                                               [i for i, _ in samples])
        self.inputs = {}
        for key in token_keys:
            stream = torch.cat([sample[key] for sample in fetched])
            pad = padded_total - total
            if pad:
                stream = torch.cat([stream, stream.new_zeros(
                    (pad,) + tuple(stream.shape[1:]))])
            self.inputs[key] = stream[mine].to(device)
        for key in per_sequence:
            self.inputs[key] = torch.stack(
                [torch.as_tensor(sample[key]) for sample in fetched]).to(device)
        positions = torch.cat([torch.arange(n) for n in lengths] +
                              [torch.zeros(padded_total - total,
                                           dtype=torch.int64)])
        sequence_index = torch.cat(
            [torch.full((n,), s, dtype=torch.int64)
             for s, n in enumerate(lengths)] +
            [torch.zeros(padded_total - total, dtype=torch.int64)])
        self.inputs["position_ids"] = positions[mine].to(device)
        self.inputs["sequence_index"] = sequence_index[mine].to(device)
        real = torch.arange(padded_total) < total
        weight = real[mine].to(torch.float64)
        if "loss_mask" in self.inputs:
            weight = weight * self.inputs["loss_mask"].to(torch.float64).cpu()
        if not counts:
            weight = torch.zeros_like(weight)
        _check_ignored_labels(self.inputs.get("labels"), weight)
        self.token_weight = weight.to(device)
        self.loss_tokens = int(weight.sum().item())
        cu = [0]
        for n in lengths:
            cu.append(cu[-1] + n)
        if padded_total > total:
            cu.append(padded_total)
        self.packing = context.Packing(
            cu_seqlens=cu, padded=padded_total > total, sp_size=sp_size,
            group=group, checkpointed_layers=self.checkpointed_layers,
            synchronize=step._runtime._synchronize)
        self._entered = None

    def token_loss_sum(self, per_token_loss: torch.Tensor) -> torch.Tensor:
        """The sum of `per_token_loss` ([T] for this rank's T tokens) over
        the tokens that count (not padding; loss_mask where given). Multiply
        by step.loss_scale for the global batch's mean per token."""
        return (per_token_loss * self.token_weight.to(per_token_loss.dtype)
                ).sum()

    def __enter__(self) -> MicroBatch:
        self._entered = context.active(self.packing)
        self._entered.__enter__()
        self._timer = context.Timer(self.packing.synchronize).__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self._timer.__exit__(exc_type, exc, tb)
        self._entered.__exit__(exc_type, exc, tb)
        self.stats.seconds = self._timer.seconds
        self.stats.communication_seconds = self.packing.communication_seconds
        if exc_type is None:
            self.done = True
        return False


def _describe(value):
    """What a value is, for an error message: its type, and its length for
    a sequence."""
    kind = type(value).__name__
    if isinstance(value, collections.abc.Sized):
        return f"a {kind} of {len(value)} items"
    return f"a {kind}"


def _checked_sample(sample_id, sample):
    """`sample` (fetch's result), unless it is not a mapping of names to
    tensors (numbers allowed for per-sequence values): TypeError naming
    the sample, the key, what it is, and what fetch must return."""
    if not isinstance(sample, collections.abc.Mapping):
        raise TypeError(
            f"fetch({sample_id}) returned {_describe(sample)}; fetch must "
            "return a dict of torch tensors, e.g. {'input_ids': "
            "torch.tensor(ids)} (token tensors with one row per token, "
            "per-sequence values as 0-dim tensors or numbers)")
    for key, value in sample.items():
        if isinstance(value, torch.Tensor) or (
                isinstance(value, numbers.Number) and
                not isinstance(value, complex)):
            continue
        raise TypeError(
            f"fetch({sample_id})[{key!r}] is {_describe(value)}, not a "
            "torch.Tensor; fetch must return torch tensors (token tensors "
            "with one row per token, per-sequence values as 0-dim tensors "
            f"or numbers): return torch.tensor(...) for {key!r}")
    return sample


def _check_ignored_labels(labels, weight):
    """IgnoredLabelsError when integer labels hold -100 at tokens of nonzero
    weight (fetch gave no loss_mask that excludes them)."""
    if labels is None or labels.is_floating_point() or labels.dim() != 1:
        return
    ignored = int(((labels.cpu() == -100) & (weight > 0)).sum())
    if ignored:
        raise IgnoredLabelsError(
            f"{ignored} tokens have label -100 but count in the loss "
            "(step.loss_scale divides by them): have fetch also return "
            "\"loss_mask\": labels != -100 (dcp_torch.causal_lm_sample "
            "does)")


def _split_keys(fetched, lengths, sequence_keys, ids):
    """The token keys and the per-sequence keys of the fetched samples,
    which must all have the same keys."""
    if not fetched:
        return [], []
    keys = list(fetched[0])
    for sample_id, sample, length in zip(ids, fetched, lengths):
        if list(sample) != keys:
            raise ValueError(f"sample {sample_id} has keys {list(sample)}, "
                             f"sample {ids[0]} has {keys}; fetch must return "
                             "the same keys for every sample")
    token_keys, per_sequence = [], []
    for key in keys:
        value = torch.as_tensor(fetched[0][key])
        if key in sequence_keys or value.dim() == 0:
            per_sequence.append(key)
            continue
        for sample_id, sample, length in zip(ids, fetched, lengths):
            if sample[key].shape[0] != length:
                raise ValueError(
                    f"fetch({sample_id})[{key!r}] has {sample[key].shape[0]} "
                    f"rows but the sampler gave the sample {length} tokens; "
                    "token tensors need one row per token (list per-sequence "
                    "keys in sequence_keys)")
        token_keys.append(key)
    return token_keys, per_sequence
