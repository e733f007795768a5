"""A batch of decoded images of different sizes, packed in one flat uint8 buffer.

Image ``i`` is ``flat[offsets[i] : offsets[i] + H*W*C]`` in H x W x C row-major order, with
``(H, W, C) = shapes[i]``. This is what raw samples already are once gathered, what the
lossless codec's batch decoder writes, and what the fused augmentation kernels read, on
the CPU (numpy) and on the GPU (numba device arrays). ``offsets`` and ``shapes`` always
live on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


def packed_offsets(shapes: np.ndarray) -> tuple[np.ndarray, int]:
    """Offsets of images of ``shapes`` packed back to back, and the total size."""
    sizes = np.prod(shapes.astype(np.int64), axis=1) if len(shapes) else np.zeros(0, np.int64)
    offsets = np.zeros(len(sizes), dtype=np.int64)
    if len(sizes) > 1:
        np.cumsum(sizes[:-1], out=offsets[1:])
    return offsets, int(sizes.sum())


@dataclass
class PackedImages:
    """Decoded images of a batch, packed (see module docstring)."""

    flat: Any
    offsets: np.ndarray
    shapes: np.ndarray
    device: str = "cpu"

    def __len__(self) -> int:
        return len(self.offsets)

    def image(self, index: int) -> Any:
        """Image ``index`` as an H x W x C view (numpy or device array)."""
        h, w, c = (int(v) for v in self.shapes[index])
        start = int(self.offsets[index])
        return self.flat[start : start + h * w * c].reshape((h, w, c))

    def to_host(self) -> PackedImages:
        if self.device == "cpu":
            return self
        return PackedImages(self.flat.copy_to_host(), self.offsets, self.shapes, "cpu")

    def to_list(self) -> list[Any]:
        return [self.image(i) for i in range(len(self))]
