"""Scalar sampling math shared by the numba CPU and CUDA kernels.

These are plain Python functions on scalars that call nothing else, so
:mod:`prepkit.augment.cpu` compiles them with ``njit`` and :mod:`prepkit.augment.cuda`
with ``cuda.jit(device=True)``: the two kernels cannot drift apart.
:mod:`prepkit.augment.reference` restates the same definitions independently in numpy.

Resampling follows ``torch.nn.functional.interpolate(mode="bilinear",
align_corners=False, antialias=...)``, which torchvision v2 uses on tensors: output
pixel r of an axis resized from ``n`` to ``m`` pixels is centred at ``(r + 0.5) * s``
in input coordinates (s = n / m); input pixel j is centred at j + 0.5; the weight of j
is a tent ``max(0, 1 - |d| / f)`` of the distance d between the centres, where f = 1
(plain bilinear), or f = s when antialiasing a downscale (the tent widens with the
scale, as PIL and torch do). Taps outside the input are dropped and the remaining
weights renormalised, which is the same as clamping to the edge for plain bilinear.
"""

from __future__ import annotations

import math

import numpy as np


def filter_width(scale: float, antialias: bool) -> np.float32:
    """Tent half-width in input pixels: the scale when antialiasing a downscale, else 1."""
    if antialias and scale > 1.0:
        return np.float32(scale)
    return np.float32(1.0)


def axis_scale(in_size: int, out_size: int) -> np.float32:
    """Input pixels per output pixel, in float32 as torch computes it for float images."""
    return np.float32(in_size) / np.float32(out_size)


def window_start(r: int, scale: float, width: float) -> int:
    """First input pixel with a non-zero weight for output pixel ``r`` (clamped at 0)."""
    center = scale * np.float32(r + 0.5)
    return max(int(center - width + np.float32(0.5)), 0)


def window_stop(r: int, scale: float, width: float, size: int) -> int:
    """One past the last input pixel with a non-zero weight (clamped at ``size``)."""
    center = scale * np.float32(r + 0.5)
    return min(int(center + width + np.float32(0.5)), size)


def tap_weight(j: int, r: int, scale: float, width: float) -> np.float32:
    """Unnormalised tent weight of input pixel ``j`` for output pixel ``r``.

    All float32 (explicitly, so numba does not widen to float64): the CUDA kernel calls
    this in its inner loop, and consumer GPUs run float64 at 1/32 to 1/64 speed.
    """
    d = (np.float32(j + 0.5) - scale * np.float32(r + 0.5)) / width
    return max(np.float32(0.0), np.float32(1.0) - abs(d))


def nearest_index(r: int, in_size: int, out_size: int, exact: bool) -> int:
    """Input pixel for output pixel ``r`` in torch's "nearest" / "nearest-exact" modes.

    Computed in float32 like torch, so indices match it exactly: "nearest" is
    floor(r * s) (torchvision's choice for masks), "nearest-exact" floor((r + 0.5) * s).
    """
    scale = np.float32(in_size) / np.float32(out_size)
    if exact:
        position = (np.float32(r) + np.float32(0.5)) * scale
    else:
        position = np.float32(r) * scale
    return min(int(math.floor(position)), in_size - 1)


#: Added before rounding resampled uint8 values; see :func:`finish_value`.
ROUND_MARGIN = 1e-3


def finish_value(v: float, round_u8: bool, a: float, b: float) -> float:
    """The value path after resampling: optional uint8 rounding, then ``v * a + b``.

    ``round_u8`` is set when the resampling op ran on uint8 data: torchvision returns a
    uint8 image then (rounded), and later ops see the rounded value.
    """
    if round_u8:
        # Round half up, with a small margin so that a tie computed as x.4999999 in
        # float32 (weights like 1/3 are inexact) rounds the same on every device.
        v = math.floor(v + 0.5 + ROUND_MARGIN)
        v = min(max(v, 0.0), 255.0)
    return v * a + b


def saturate_uint8(x: float) -> int:
    """float -> uint8 as torch's ``.to(uint8)`` (truncation), saturating instead of wrapping."""
    if not x > 0.0:  # also maps NaN to 0
        return 0
    if x >= 255.0:
        return 255
    return int(x)
