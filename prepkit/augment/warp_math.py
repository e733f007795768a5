"""Per-pixel math of the colour stage's affine steps (auto-augment's shears, translations
and rotations), compiled for both the CPU and CUDA kernels.

Restates torchvision.transforms.v2.functional.affine / rotate on tensors for one output
pixel: ``_affine_grid`` (pixel centres relative to the image centre, times the inverse
matrix rescaled by the half size, in float32) then ``grid_sample(align_corners=False,
padding_mode="zeros")`` with torch's CPU arithmetic, whose compiled kernel fuses multiply-adds:
``fma(g + 1, size / 2, -0.5)``, nearest = round half to even, bilinear weights
``(1 - dy)(1 - dx)`` ... summed nw, ne, sw, se as a chain of fused multiply-adds. The grid's two sums follow torch's CPU ``bmm``: a fused multiply-add chain (its gemm)
or, for images under 67 pixels, its small-matrix loop of plain float32 sums.

The host computes each step's float32 row (:data:`WARP` values, see ``WARP_*``) in
:func:`prepkit.augment.colour.warp_row`; the kernels only read it. Plain Python on
purpose, as :mod:`prepkit.augment.colour_math`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba.extending import register_jitable

from prepkit.augment.colour_math import fma32

Value = Any

#: Step codes of the geometric steps (after colour_math's colour codes). The rotations by
#: 90 / 180 / 270 degrees are torchvision's ``rot90`` fast paths (90 and 270 on square images).
AFFINE_NEAREST, AFFINE_BILINEAR, ROTATE_90, ROTATE_180, ROTATE_270 = 10, 11, 12, 13, 14
#: float32 values per step: the rescaled inverse matrix (x row: 0..2, y row: 3..5), whether a
#: fill was given, the fill per channel.
WARP_HAS_FILL, WARP_FILL, WARP = 6, 7, 10
#: torch's bmm sums in a plain loop when 3 * pixels * 2 < 400 (ATen's small-matrix path).
SMALL_GRID_PIXELS = 67


@register_jitable
def mul32(a: Value, b: Value) -> Value:
    """float32 ``a * b`` that the CUDA compiler cannot fuse into a following add (by default it
    contracts ``a * b + c`` into one FMA, which rounds once where torch rounds twice). Adding
    +0.0 cannot be folded away (it turns -0 into +0, harmless here), so the product becomes
    ``fma(a, b, 0)``, rounded on its own."""
    return a * b + np.float32(0.0)


@register_jitable
def is_warp(code: int) -> bool:
    """Does step ``code`` move pixels (an affine step or a rotation fast path)?"""
    return code >= AFFINE_NEAREST


@register_jitable
def _grid(xb: Value, yb: Value, a: Value, b: Value, c: Value, small: bool) -> Value:
    if small:
        return (mul32(xb, a) + mul32(yb, b)) + c
    return fma32(yb, b, mul32(xb, a)) + c


@register_jitable
def source_point(ox: int, oy: int, h: int, w: int, warp: Any, i: int, k: int, small: bool) -> tuple[Value, Value]:
    """(ix, iy): where grid_sample reads output pixel (ox, oy), in input pixel units."""
    xb = np.float32(ox) - np.float32(0.5 * (w - 1))  # _affine_grid's linspace, exact
    yb = np.float32(oy) - np.float32(0.5 * (h - 1))
    gx = _grid(xb, yb, warp[i, k, 0], warp[i, k, 1], warp[i, k, 2], small)
    gy = _grid(xb, yb, warp[i, k, 3], warp[i, k, 4], warp[i, k, 5], small)
    half = np.float32(-0.5)  # torch's compiled unnormalize fuses (g + 1) * (size / 2) - 0.5
    ix = fma32(gx + np.float32(1.0), np.float32(0.5 * w), half)
    iy = fma32(gy + np.float32(1.0), np.float32(0.5 * h), half)
    return ix, iy


@register_jitable
def round_half_even(v: Value) -> int:
    """torch's ``round`` (nearbyint) of a float32, as an int."""
    f = np.float32(math.floor(v))
    d = v - f  # exact for float32
    n = int(f)
    if d > np.float32(0.5) or (d == np.float32(0.5) and n % 2 != 0):
        n += 1
    return n


@register_jitable
def nearest_source(code: int, ox: int, oy: int, h: int, w: int, warp: Any, i: int, k: int, small: bool) -> int:
    """Pixel index (y * w + x) the nearest warp ``code`` reads for (ox, oy), or -1 (outside)."""
    if code == ROTATE_180:
        return (h - 1 - oy) * w + (w - 1 - ox)
    if code == ROTATE_90:  # torch.rot90(k=1) of a square image: out[y, x] = in[x, w - 1 - y]
        return ox * w + (w - 1 - oy)
    if code == ROTATE_270:  # rot90(k=3): out[y, x] = in[h - 1 - x, y]
        return (h - 1 - ox) * w + oy
    ix, iy = source_point(ox, oy, h, w, warp, i, k, small)
    x = round_half_even(ix)
    y = round_half_even(iy)
    if x < 0 or x >= w or y < 0 or y >= h:
        return -1
    return y * w + x


@register_jitable
def _inside(h: int, w: int, y: int, x: int) -> Value:
    """1 inside the image, 0 outside: a corner of grid_sample's zero padding."""
    return np.float32(1.0) if 0 <= x < w and 0 <= y < h else np.float32(0.0)


@register_jitable
def _corner(src: Any, base: int, channels: int, h: int, w: int, y: int, x: int, c: int) -> Value:
    if x < 0 or x >= w or y < 0 or y >= h:
        return np.float32(0.0)
    return src[base + (y * w + x) * channels + c]


@register_jitable
def _bilinear(
    src: Any, base: int, channels: int, h: int, w: int, y0: int, x0: int, c: int, nw: Value, ne: Value, sw: Value,
    se: Value,
) -> Value:  # fmt: skip
    """Channel c of grid_sample's bilinear value: nw + ne + sw + se, in that order, each term
    after the first fused into the sum (as torch's compiled CPU kernel computes it)."""
    v = mul32(_corner(src, base, channels, h, w, y0, x0, c), nw)
    v = fma32(_corner(src, base, channels, h, w, y0, x0 + 1, c), ne, v)
    v = fma32(_corner(src, base, channels, h, w, y0 + 1, x0, c), sw, v)
    return fma32(_corner(src, base, channels, h, w, y0 + 1, x0 + 1, c), se, v)


@register_jitable
def warp_pixel(
    src: Any, base: int, channels: int, h: int, w: int, ox: int, oy: int, code: int, warp: Any, i: int, k: int,
    small: bool, is_u8: bool,
) -> tuple[Value, Value, Value]:  # fmt: skip
    """The 1 or 3 values of output pixel (ox, oy) of warp step ``code`` over ``src`` (float32,
    NHWC from ``base``): grid_sample's value, the fill where the mask says outside, then
    torch's ``round_()`` for uint8 data."""
    has_fill = warp[i, k, WARP_HAS_FILL] != np.float32(0.0)
    v0 = v1 = v2 = np.float32(0.0)
    if code != AFFINE_BILINEAR:
        q = nearest_source(code, ox, oy, h, w, warp, i, k, small)
        if q >= 0:
            v0 = src[base + q * channels]
            v1 = src[base + q * channels + 1] if channels == 3 else v0
            v2 = src[base + q * channels + 2] if channels == 3 else v0
        elif has_fill:  # mask < 0.5: the fill
            v0 = warp[i, k, WARP_FILL]
            v1 = warp[i, k, WARP_FILL + 1]
            v2 = warp[i, k, WARP_FILL + 2]
    else:
        ix, iy = source_point(ox, oy, h, w, warp, i, k, small)
        fx = np.float32(math.floor(ix))
        fy = np.float32(math.floor(iy))
        we = ix - fx
        ea = np.float32(1.0) - we
        no = iy - fy
        so = np.float32(1.0) - no
        nw, ne, sw, se = so * ea, so * we, no * ea, no * we
        x0, y0 = int(fx), int(fy)
        v0 = _bilinear(src, base, channels, h, w, y0, x0, 0, nw, ne, sw, se)
        v1 = _bilinear(src, base, channels, h, w, y0, x0, 1, nw, ne, sw, se) if channels == 3 else v0
        v2 = _bilinear(src, base, channels, h, w, y0, x0, 2, nw, ne, sw, se) if channels == 3 else v0
        if has_fill:
            # The mask (ones) sampled the same way; torch: (v - fill) * mask + fill.
            m = mul32(_inside(h, w, y0, x0), nw)
            m = fma32(_inside(h, w, y0, x0 + 1), ne, m)
            m = fma32(_inside(h, w, y0 + 1, x0), sw, m)
            m = fma32(_inside(h, w, y0 + 1, x0 + 1), se, m)
            # torch's sub_, mul_, add_: three roundings.
            v0 = mul32(v0 - warp[i, k, WARP_FILL], m) + warp[i, k, WARP_FILL]
            v1 = mul32(v1 - warp[i, k, WARP_FILL + 1], m) + warp[i, k, WARP_FILL + 1]
            v2 = mul32(v2 - warp[i, k, WARP_FILL + 2], m) + warp[i, k, WARP_FILL + 2]
    if is_u8:
        v0, v1, v2 = settle_u8(v0), settle_u8(v1), settle_u8(v2)
    return v0, v1, v2


@register_jitable
def settle_u8(v: Value) -> Value:
    """``round_().to(uint8)``: half to even, saturated (torch's cast of an out-of-range fill wraps)."""
    return np.float32(min(max(round_half_even(v), 0), 255))
