"""What the reader hands to a training step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Batch:
    """One batch: ``images`` (N, C, h, w) by default, ``labels`` (N,) int64 (-1 = no label)
    or float32 (N, num_classes) when the transforms end with MixUp / CutMix,
    ``indices`` (N,) the store indices of its samples, ``masks`` when asked for.

    Arrays are numpy on the CPU, numba device arrays on the GPU, or torch tensors with
    ``output="torch"``. Without transforms, images of different sizes come as a list.

    ``extras`` holds the extra fields asked for (``Reader(fields=...)``), by name: fixed-size
    ones stacked, (N,) or (N, *shape); variable-length ones as a list of N values (arrays,
    str or bytes), or, for arrays named in ``Reader(pad_fields=...)``, one array padded to the
    batch's longest sample with ``lengths[name]`` (N,) int64 the rows of each.
    """

    images: Any
    labels: Any
    indices: np.ndarray
    masks: Any = None
    epoch: int = 0
    number: int = 0  # position of this batch in the epoch
    extras: dict[str, Any] = field(default_factory=dict)
    lengths: dict[str, Any] = field(default_factory=dict)  # padded extra fields: rows per sample

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self):
        # `images, labels = batch` as with a DataLoader.
        yield self.images
        yield self.labels
