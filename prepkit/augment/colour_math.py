"""Scalar colour math of the colour stage, compiled for both the CPU and CUDA kernels.

Each function restates one torchvision.transforms.v2 colour kernel for one value (or one
pixel) with torch's float32 arithmetic, in torch's order: uint8 data is carried as whole
float32 numbers, each adjustment clamps to [0, bound] (255 for uint8, 1 for float) and
uint8 results are truncated, as torch's ``.to(uint8)``. Python floats (``ratio``, ``factor``)
are rounded to float32 where torch turns a Python scalar into a float32 operand.

Plain Python on purpose: :mod:`prepkit.augment.colour` wraps the functions with
``numba.njit`` and :mod:`prepkit.augment.cuda` with ``cuda.jit(device=True)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba.extending import register_jitable

from prepkit.augment.sampling import saturate_uint8

# Registered so that these functions can call each other (and saturate_uint8) from inside
# numba CPU and CUDA code, while staying plain Python for the CUDA simulator.
register_jitable(saturate_uint8)

#: A float32 scalar (numba types these functions; numpy's stubs cannot follow float32 math).
Value = Any

#: Step codes of the colour stage (one (code, argument) pair per step and sample).
IDENTITY, BRIGHTNESS, CONTRAST, SATURATION, HUE, SHARPNESS = 0, 1, 2, 3, 4, 5
POSTERIZE, SOLARIZE, AUTOCONTRAST, EQUALIZE = 6, 7, 8, 9

#: Per-image statistics of the step being applied: [0] contrast mean, [1:4] autocontrast
#: minimum, [4:7] autocontrast 1/scale, [8 + 256 c + v] equalize's output for value v.
STAT_MEAN, STAT_LOW, STAT_INV, STAT_LUT = 0, 1, 4, 8
STATS = STAT_LUT + 3 * 256


@register_jitable
def settle(v: Value, bound: Value, is_u8: bool) -> Value:
    """Clamp to [0, bound] and, for uint8 data, truncate (torch's ``clamp_().to(uint8)``)."""
    v = min(max(v, np.float32(0.0)), bound)
    if is_u8:
        v = np.float32(math.floor(v))
    return v


@register_jitable
def fma32(a: Value, b: Value, c: Value) -> Value:
    """float32 ``a * b + c`` rounded once, as torch's ``add_(other, alpha=...)`` computes it on
    the CPU (a fused multiply-add): the float64 product of two float32 values is exact, so
    only the float64 sum and the final float32 rounding round (equal to a true FMA except
    at double-rounding ties, about one value in 2**29)."""
    return np.float32(np.float64(a) * np.float64(b) + np.float64(c))


@register_jitable
def blend(x: Value, other: Value, ratio: Value, bound: Value, is_u8: bool) -> Value:
    """torchvision's ``_blend``: ``x * ratio + other * (1 - ratio)`` (the second product
    fused into the sum, as torch does), settled."""
    v = fma32(other, np.float32(1.0 - ratio), x * np.float32(ratio))
    return settle(v, bound, is_u8)


@register_jitable
def gray(r: Value, g: Value, b: Value, is_u8: bool) -> Value:
    """``_rgb_to_grayscale_image`` (0.2989, 0.587, 0.114, in that order), floored for uint8."""
    v = r * np.float32(0.2989)
    v = fma32(g, np.float32(0.587), v)
    v = fma32(b, np.float32(0.114), v)
    if is_u8:
        v = np.float32(math.floor(v))
    return v


@register_jitable
def _hsv_rgb(i: int, v: Value, p: Value, q: Value, t: Value) -> tuple[Value, Value, Value]:
    # _hsv_to_rgb's select table: R = (v, q, p, p, t, v), G = (t, v, v, q, p, p), B = (p, p, t, v, v, q).
    if i == 0:
        return v, t, p
    if i == 1:
        return q, v, p
    if i == 2:
        return p, v, t
    if i == 3:
        return p, q, v
    if i == 4:
        return t, p, v
    return v, p, q


@register_jitable
def hue_shift(r: Value, g: Value, b: Value, hue: Value, is_u8: bool) -> tuple[Value, Value, Value]:
    """``adjust_hue_image``: to float [0, 1], RGB -> HSV, ``(h + hue) mod 1``, HSV -> RGB, back."""
    one = np.float32(1.0)
    if is_u8:
        r, g, b = r * np.float32(1.0 / 255), g * np.float32(1.0 / 255), b * np.float32(1.0 / 255)
    maxc = max(r, max(g, b))
    minc = min(r, min(g, b))
    span = maxc - minc
    s = span / (one if maxc == minc else maxc)
    divisor = one if maxc == minc else span
    rc, gc, bc = (maxc - r) / divisor, (maxc - g) / divisor, (maxc - b) / divisor
    if maxc == r:
        h = bc - gc
    elif maxc == g:
        h = (rc + np.float32(2.0)) - bc
    else:
        h = (gc + np.float32(4.0)) - rc
    h = h * np.float32(1.0 / 6.0) + one
    h = h - np.float32(math.floor(h))  # fmod(h, 1) for h > 0
    h = h + np.float32(hue)
    h = h - np.float32(math.floor(h))  # torch's remainder(h, 1)
    h6 = h * np.float32(6.0)
    i6 = np.float32(math.floor(h6))
    f = h6 - i6
    i = int(i6) % 6
    sv = s * maxc
    p = min(max(maxc - sv, np.float32(0.0)), one)
    svf = sv * f
    q = min(max(maxc - svf, np.float32(0.0)), one)
    t = min(max(svf + p, np.float32(0.0)), one)
    out_r, out_g, out_b = _hsv_rgb(i, maxc, p, q, t)
    if is_u8:  # to_dtype(uint8, scale=True): x * 255.999, truncated
        scale = np.float32(255.999)
        return (np.float32(saturate_uint8(out_r * scale)), np.float32(saturate_uint8(out_g * scale)),
                np.float32(saturate_uint8(out_b * scale)))  # fmt: skip
    return out_r, out_g, out_b


@register_jitable
def posterize(x: Value, bits: int, is_u8: bool) -> Value:
    """``posterize_image``: keep the top ``bits`` bits (uint8), or floor to 2**bits levels (float)."""
    if is_u8:
        if bits >= 8:
            return x
        mask = ((1 << bits) - 1) << (8 - bits)
        return np.float32(int(x) & mask)
    levels = 1 << bits
    v = np.float32(math.floor(x * np.float32(levels)))
    v = min(max(v, np.float32(0.0)), np.float32(levels - 1))
    return v * np.float32(1.0 / levels)


@register_jitable
def solarize(x: Value, magnitude: Value, bound: Value, is_u8: bool) -> Value:
    """``solarize_image`` at threshold ``bound * magnitude`` (auto-augment's scaling): invert
    the values >= threshold (compared in float32, as torch promotes the Python scalar)."""
    threshold = np.float32((255.0 if is_u8 else 1.0) * magnitude)
    if x >= threshold:
        return bound - x
    return x


@register_jitable
def autocontrast(x: Value, low: Value, inv_scale: Value, bound: Value, is_u8: bool) -> Value:
    """``autocontrast_image`` for one value: ``(x - min) / ((max - min) / bound)``, settled."""
    return settle((x - low) / inv_scale, bound, is_u8)


@register_jitable
def autocontrast_stats(low: Value, high: Value, is_u8: bool) -> tuple[Value, Value]:
    """(minimum, 1/scale) of a channel; a flat channel keeps (0, 1) as torchvision does."""
    if high == low:
        return np.float32(0.0), np.float32(1.0)
    return low, (high - low) * np.float32(1.0 / 255 if is_u8 else 1.0)


@register_jitable
def quantize(x: Value, is_u8: bool) -> int:
    """The uint8 bin equalize uses: the value itself, or ``to_dtype(uint8, scale=True)`` of a float."""
    if is_u8:
        return int(x)
    return saturate_uint8(x * np.float32(255.999))


@register_jitable
def equalize_lut(hist: Any, hist_base: int, stats: Any, stats_base: int, pixels: int, is_u8: bool) -> None:
    """``equalize_image``'s PIL-style table for one channel, written as output values.

    ``step = (pixels - count of the last occupied bin) // 255``; ``lut[0] = 0`` and
    ``lut[v] = min((cum[v - 1] + step // 2) // step, 255)``; ``step == 0`` leaves values alone.
    Floats come back through ``to_dtype(float32, scale=True)`` (times float32(1/255)).
    """
    last = 0
    for v in range(256):
        if hist[hist_base + v] > 0:
            last = v
    step = (pixels - hist[hist_base + last]) // 255
    cum = 0
    for v in range(256):
        if step == 0:
            q = v
        elif v == 0:
            q = 0
        else:
            q = min((cum + step // 2) // step, 255)
        cum += hist[hist_base + v]
        stats[stats_base + v] = np.float32(q) if is_u8 else np.float32(q) * np.float32(1.0 / 255)


@register_jitable
def sharpen(x: Value, neighbours: Value, factor: Value, bound: Value, is_u8: bool) -> Value:
    """``adjust_sharpness_image`` for an interior value: blur with the 3x3 kernel (1s around
    a 5, over 13; rounded for uint8), then ``x + (1 - factor) * (blur - x)``, settled.

    For uint8 the blur is computed in integers: (sum + 5 x) / 13 is never a tie, so
    rounding it equals rounding torch's float32 convolution."""
    if is_u8:
        total = int(neighbours) + 5 * int(x)
        blur = np.float32((total + 6) // 13)
    else:
        blur = neighbours * np.float32(1.0 / 13.0) + x * np.float32(5.0 / 13.0)
    v = fma32(blur - x, np.float32(1.0 - factor), x)
    return settle(v, bound, is_u8)


@register_jitable
def apply_pixel(
    code: int, arg: float, bound: Value, is_u8: bool, channels: int, v0: Value, v1: Value, v2: Value, stats: Any
) -> tuple[Value, Value, Value]:
    """One per-pixel step (every code but SHARPNESS) on a pixel's 1 or 3 values.

    ``stats`` holds the image statistics the step needs (see ``STAT_*``). Saturation and
    hue leave 1-channel images alone, as torchvision does.
    """
    if code == BRIGHTNESS:
        f = np.float32(arg)
        return settle(v0 * f, bound, is_u8), settle(v1 * f, bound, is_u8), settle(v2 * f, bound, is_u8)
    if code == CONTRAST:
        m = stats[STAT_MEAN]
        return blend(v0, m, arg, bound, is_u8), blend(v1, m, arg, bound, is_u8), blend(v2, m, arg, bound, is_u8)
    if code == SATURATION and channels == 3:
        g = gray(v0, v1, v2, is_u8)
        return blend(v0, g, arg, bound, is_u8), blend(v1, g, arg, bound, is_u8), blend(v2, g, arg, bound, is_u8)
    if code == HUE and channels == 3:
        return hue_shift(v0, v1, v2, arg, is_u8)
    if code == POSTERIZE:
        bits = int(arg)
        return posterize(v0, bits, is_u8), posterize(v1, bits, is_u8), posterize(v2, bits, is_u8)
    if code == SOLARIZE:
        return solarize(v0, arg, bound, is_u8), solarize(v1, arg, bound, is_u8), solarize(v2, arg, bound, is_u8)
    if code == AUTOCONTRAST and channels == 1:  # the statistics of channels 1 and 2 are unset
        return autocontrast(v0, stats[STAT_LOW], stats[STAT_INV], bound, is_u8), v1, v2
    if code == EQUALIZE and channels == 1:
        return stats[STAT_LUT + quantize(v0, is_u8)], v1, v2
    if code == AUTOCONTRAST:
        return (autocontrast(v0, stats[STAT_LOW], stats[STAT_INV], bound, is_u8),
                autocontrast(v1, stats[STAT_LOW + 1], stats[STAT_INV + 1], bound, is_u8),
                autocontrast(v2, stats[STAT_LOW + 2], stats[STAT_INV + 2], bound, is_u8))  # fmt: skip
    if code == EQUALIZE:
        return (stats[STAT_LUT + quantize(v0, is_u8)], stats[STAT_LUT + 256 + quantize(v1, is_u8)],
                stats[STAT_LUT + 512 + quantize(v2, is_u8)])  # fmt: skip
    return v0, v1, v2


@register_jitable
def contrast_value(v0: Value, v1: Value, v2: Value, channels: int, is_u8: bool) -> Value:
    """What contrast averages over the image: the grayscale value (floored for uint8) of an
    RGB pixel, the value itself for one channel."""
    if channels == 3:
        return gray(v0, v1, v2, is_u8)
    return v0
