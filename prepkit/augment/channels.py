"""Channel conversion (Grayscale, RGB) of packed uint8 images, on the CPU and the GPU.

A channel op maps every pixel on its own, so it runs as one pass over the stored uint8
pixels before the fused geometry kernel: packed (flat, offsets, shapes) in, packed out
with the target channel count. Images of a batch may differ in channels (a ``--mode
keep`` store of 1, 3 and 4-channel images); after the pass they all agree. The pass is
exact where torchvision computes the op on uint8 images before any resample (crops and
flips commute with a per-pixel op), which is why the pipeline only accepts channel ops
there.

:func:`luma` is the scalar definition shared by the numba CPU kernel here and the CUDA
kernel in :mod:`prepkit.augment.cuda`; :func:`reference` restates it in numpy.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from prepkit.augment import colour_math
from prepkit.augment.colour_math import gray
from prepkit.augment.ops import Grayscale, Op
from prepkit.jitcache import guard_disk_cache

#: What a channel op writes for each pixel (the ``mode`` argument of the kernels).
MODE_RGB = 0  # 1 -> repeated to 3, 3 -> as is, 4 -> alpha dropped
MODE_GRAY = 1  # luma, truncated to uint8 (1-channel images pass through)


class ChannelStep(NamedTuple):
    """One channel op reduced to what the kernels need."""

    mode: int
    channels: int  # output channels


def step_of(op: Op) -> ChannelStep:
    """The kernel parameters of a channel op (Grayscale or RGB)."""
    if isinstance(op, Grayscale):
        return ChannelStep(MODE_GRAY, op.num_output_channels)
    return ChannelStep(MODE_RGB, 3)


def luma(r: int, g: int, b: int) -> int:
    """torchvision's rgb_to_grayscale on uint8: float32 ``r*0.2989 + g*0.587 + b*0.114``
    accumulated in that order, the last two products fused into the sums as torch's
    ``add_(other, alpha=...)`` does (``colour_math.gray``), then truncated (``.to(uint8)``)."""
    return min(int(gray(np.float32(r), np.float32(g), np.float32(b), True)), 255)


def output_layout(shapes: np.ndarray, channels: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(offsets, shapes, total bytes) of the packed output with ``channels`` per pixel."""
    out_shapes = np.ascontiguousarray(shapes, dtype=np.int32).copy()
    out_shapes[:, 2] = channels
    sizes = out_shapes.astype(np.int64).prod(axis=1)
    offsets = np.zeros(len(sizes), np.int64)
    if len(sizes) > 1:
        offsets[1:] = np.cumsum(sizes)[:-1]
    return offsets, out_shapes, int(sizes.sum())


luma_cpu = njit(inline="always")(luma)


@njit(parallel=True, nogil=True, cache=True)
def _convert_kernel(flat, offsets, shapes, mode, channels, out, out_offsets):
    for i in prange(shapes.shape[0]):
        src_c = shapes[i, 2]
        for p in range(shapes[i, 0] * shapes[i, 1]):
            q = offsets[i] + p * src_c
            r = np.int32(flat[q])
            g = np.int32(flat[q + 1]) if src_c >= 3 else r
            b = np.int32(flat[q + 2]) if src_c >= 3 else r
            for c in range(channels):
                if mode == 0 or src_c == 1:
                    v = r if c == 0 else (g if c == 1 else b)
                else:
                    v = luma_cpu(r, g, b)
                out[out_offsets[i] + p * channels + c] = v


def convert_cpu(
    flat: np.ndarray, offsets: np.ndarray, shapes: np.ndarray, step: ChannelStep
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run one channel op over a packed host batch; returns the packed output."""
    out_offsets, out_shapes, total = output_layout(shapes, step.channels)
    out = np.empty(total, np.uint8)
    _convert_kernel(flat, offsets, np.ascontiguousarray(shapes, dtype=np.int32), step.mode, step.channels, out, out_offsets)
    return out, out_offsets, out_shapes


def reference(image: np.ndarray, step: ChannelStep) -> np.ndarray:
    """The numpy oracle for one HxWxC uint8 image (torchvision's equations, in float32)."""
    rgb = np.repeat(image, 3, axis=2) if image.shape[2] == 1 else image[:, :, :3]
    if step.mode == MODE_RGB or image.shape[2] == 1:
        return np.ascontiguousarray(rgb[:, :, : step.channels])
    f = rgb.astype(np.float32)
    gray = f[:, :, 0] * np.float32(0.2989) + f[:, :, 1] * np.float32(0.587) + f[:, :, 2] * np.float32(0.114)
    gray = np.minimum(np.trunc(gray), 255).astype(np.uint8)[:, :, None]
    return np.ascontiguousarray(np.repeat(gray, step.channels, axis=2))


# The kernels inline colour_math's gray: see prepkit.jitcache.
guard_disk_cache(globals(), (colour_math,))
