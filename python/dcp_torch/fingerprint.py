"""The fingerprint of a global batch, exactly as the C++ planner computes it
(planner/client/batch_fingerprint.h, kBatchFingerprintVersion 2), so that a
rank can fetch a step's plan by step and fingerprint without sending the
batch. Pure; thread-safe."""

from typing import Iterable, Tuple

BATCH_FINGERPRINT_VERSION = 2

_MASK = (1 << 64) - 1
_SEED = 0x6463702D62617463  # "dcp-batc"


def _mix(x):
    """splitmix64's finalizer, modulo 2^64."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _absorb(h, word):
    x = h ^ _mix(word & _MASK)  # & _MASK: a negative id as its 64-bit word
    rotated = ((x << 27) | (x >> 37)) & _MASK
    return (rotated * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & _MASK


def batch_fingerprint(samples: Iterable[Tuple[int, int]]) -> int:
    """The fingerprint of `samples`, a sequence of (id, length_tokens) pairs
    in batch order: a nonzero unsigned 64-bit int."""
    samples = list(samples)
    h = _mix(_SEED ^ len(samples))
    for sample_id, length_tokens in samples:
        h = _absorb(h, int(sample_id))
        h = _absorb(h, int(length_tokens))
    value = _mix(h)
    return value if value != 0 else 1
