"""Counter-based random numbers for augmentation parameters, drawn on the host.

A draw is a pure function of (seed, epoch, sample index, stream, draw number): the
splitmix64 finaliser applied to those integers chained together. So a sample gets the
same crop box and flip whatever batch it lands in, in whatever order, on either device,
and a whole batch is drawn with a handful of vectorised numpy operations (no Generator
per sample).
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

_U64 = TypeVar("_U64", np.uint64, np.ndarray)  # a uint64 scalar or array

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(z: _U64) -> _U64:
    """splitmix64's finaliser: a bijection on uint64 with good avalanche."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def keys(seed: int, epoch: int, indices: np.ndarray, stream: int) -> np.ndarray:
    """uint64[N]: one key per sample, for draws made inside a kernel (per-pixel noise)."""
    idx = np.asarray(indices, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) + _GOLDEN)
        key = _mix(key ^ (np.uint64(epoch & 0xFFFFFFFFFFFFFFFF) + _GOLDEN))
        key = _mix(key ^ (np.uint64(stream & 0xFFFFFFFFFFFFFFFF) * _GOLDEN))
        return _mix(key ^ (idx + _GOLDEN) ^ np.uint64(0x5EED))


def uniform(seed: int, epoch: int, indices: np.ndarray, stream: int, draws: int) -> np.ndarray:
    """Return float64[N, draws] uniform in [0, 1), one row per sample index.

    ``stream`` separates the ops of a pipeline (it is the op's position), so adding an op
    does not change the numbers the others draw.
    """
    idx = np.asarray(indices, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) + _GOLDEN)
        key = _mix(key ^ (np.uint64(epoch & 0xFFFFFFFFFFFFFFFF) + _GOLDEN))
        key = _mix(key ^ (np.uint64(stream & 0xFFFFFFFFFFFFFFFF) * _GOLDEN))
        per_sample = _mix(key ^ (idx + _GOLDEN))
        counters = np.arange(draws, dtype=np.uint64) + np.uint64(1)
        bits = _mix(per_sample[:, None] + counters[None, :] * _GOLDEN)
    # The top 53 bits make a double in [0, 1) with every value equally likely.
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
