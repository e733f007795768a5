"""The colour stage: ColorJitter, TrivialAugmentWide and RandAugment after the resample.

These ops change values per sample with per-image statistics (contrast's mean, the
autocontrast range, equalize's histogram) and, for sharpness, neighbours; torchvision
applies them to the cropped, resized image. So they run as one pass over the fused
kernel's output: the kernel writes the image as it is at the colour ops' position
(float32, uint8 values as whole numbers) into a scratch buffer, then one parallel pass per
batch (this module on the CPU, ``cuda.colour_kernel`` on the GPU) runs every sample's
steps in its order, then the value ops after the stage (ToDtype, Normalize), the cast and
the output layout.

Per sample the ops become a row of (code, argument) steps, drawn on the host from
(seed, epoch, index, op position) like the crops (:func:`steps`): ColorJitter gives its
four adjustments in a random permutation, TrivialAugmentWide one op, RandAugment
``num_ops``. The arithmetic is :mod:`prepkit.augment.colour_math`, shared by both kernels;
:func:`prepkit.augment.reference.colour` restates it in numpy.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from prepkit.augment import bits, colour_math, cpu, sampling
from prepkit.augment.colour_math import (
    AUTOCONTRAST,
    BRIGHTNESS,
    CONTRAST,
    EQUALIZE,
    HUE,
    IDENTITY,
    POSTERIZE,
    SATURATION,
    SHARPNESS,
    SOLARIZE,
    STAT_INV,
    STAT_LOW,
    STAT_LUT,
    STAT_MEAN,
    STATS,
)
from prepkit.augment.cpu import _emit_row, _out_index
from prepkit.augment.ops import ColorJitter, Op, RandAugment, TrivialAugmentWide
from prepkit.errors import PipelineError
from prepkit.jitcache import guard_disk_cache

#: The auto-augment ops prepkit computes exactly, in torchvision's order. torchvision's
#: ShearX/ShearY/TranslateX/TranslateY/Rotate are left out (they need an affine sampler).
AUGMENT_SPACE = ("Identity", "Brightness", "Color", "Contrast", "Sharpness", "Posterize", "Solarize",
                 "AutoContrast", "Equalize")  # fmt: skip
_CODES = {"Identity": IDENTITY, "Brightness": BRIGHTNESS, "Color": SATURATION, "Contrast": CONTRAST,
          "Sharpness": SHARPNESS, "Posterize": POSTERIZE, "Solarize": SOLARIZE, "AutoContrast": AUTOCONTRAST,
          "Equalize": EQUALIZE}  # fmt: skip
_SIGNED = ("Brightness", "Color", "Contrast", "Sharpness")


def linspace_f32(start: float, end: float, steps: int) -> np.ndarray:
    """torch.linspace in float32: ``start + step * i`` up to half way, ``end - step * (steps - 1 - i)``
    after, each a fused multiply-add as torch's CPU kernel computes them."""
    start32, end32 = np.float32(start), np.float32(end)
    step = np.float64((end32 - start32) / np.float32(steps - 1))
    i = np.arange(steps, dtype=np.float64)
    low = (step * i + np.float64(start32)).astype(np.float32)
    high = (np.float64(end32) - step * (steps - 1 - i)).astype(np.float32)
    return np.where(i < steps // 2, low, high).astype(np.float32)


def magnitudes(name: str, bins: int, wide: bool) -> np.ndarray | None:
    """float64[bins]: the magnitude of each bin of op ``name`` (None when it takes none).

    TrivialAugmentWide (``wide``) and RandAugment's tables: 0..0.99 (0..0.9) for the
    factor ops, ``8 - round(k / ((bins - 1) / 6))`` (/ 4) bits for Posterize, 1..0 for Solarize.
    """
    if name in _SIGNED:
        return linspace_f32(0.0, 0.99 if wide else 0.9, bins).astype(np.float64)
    if name == "Posterize":
        k = np.arange(bins).astype(np.float32) / np.float32((bins - 1) / (6 if wide else 4))
        return (8 - np.rint(k).astype(np.int64)).astype(np.float64)
    if name == "Solarize":
        return linspace_f32(1.0, 0.0, bins).astype(np.float64)
    return None


def _auto_step(names: np.ndarray, magnitude: np.ndarray, negate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, args) of auto-augment ops: factor ops take ``1 + (+-magnitude)``, Posterize its
    bits, Solarize its magnitude (the kernel multiplies by the data's bound)."""
    codes = np.array([_CODES[AUGMENT_SPACE[k]] for k in names], np.int32)
    signed = np.isin(names, [AUGMENT_SPACE.index(s) for s in _SIGNED])
    value = np.where(signed & negate, -magnitude, magnitude)
    args = np.where(signed, 1.0 + value, value)
    return codes, np.where(np.isnan(args), 0.0, args)


def steps(op: Op, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int32[N, K] step codes and float64[N, K] arguments of one colour op, from its uniforms."""
    n = u.shape[0]
    if isinstance(op, ColorJitter):
        ranges = (op.brightness, op.contrast, op.saturation, op.hue)
        kinds = np.array([BRIGHTNESS, CONTRAST, SATURATION, HUE], np.int32)
        order = np.argsort(u[:, :4], axis=1, kind="stable")  # a uniform random permutation
        factors = np.zeros((n, 4))
        for j, span in enumerate(ranges):
            if span is not None:
                factors[:, j] = span[0] + u[:, 4 + j] * (span[1] - span[0])
        active = np.array([span is not None for span in ranges])
        codes = np.where(active[order], kinds[order], IDENTITY).astype(np.int32)
        return codes, np.take_along_axis(factors, order, axis=1)
    if isinstance(op, TrivialAugmentWide):
        bins = op.num_magnitude_bins
        names = np.minimum((u[:, 0] * len(AUGMENT_SPACE)).astype(np.int64), len(AUGMENT_SPACE) - 1)
        chosen = np.minimum((u[:, 1] * bins).astype(np.int64), bins - 1)
        magnitude = np.full(n, np.nan)
        for k, name in enumerate(AUGMENT_SPACE):
            table = magnitudes(name, bins, wide=True)
            if table is not None:
                magnitude = np.where(names == k, table[chosen], magnitude)
        codes, args = _auto_step(names, magnitude, u[:, 2] <= 0.5)
        return codes[:, None], args[:, None]
    if isinstance(op, RandAugment):
        code_cols, arg_cols = [], []
        for j in range(op.num_ops):
            names = np.minimum((u[:, 2 * j] * len(AUGMENT_SPACE)).astype(np.int64), len(AUGMENT_SPACE) - 1)
            magnitude = np.full(n, np.nan)
            for k, name in enumerate(AUGMENT_SPACE):
                table = magnitudes(name, op.num_magnitude_bins, wide=False)
                if table is not None:
                    magnitude = np.where(names == k, table[op.magnitude], magnitude)
            codes, args = _auto_step(names, magnitude, u[:, 2 * j + 1] <= 0.5)
            code_cols.append(codes)
            arg_cols.append(args)
        return np.stack(code_cols, axis=1).reshape(n, -1), np.stack(arg_cols, axis=1).reshape(n, -1)
    raise PipelineError(f"{type(op).__name__}: Expected a colour op. Got {op!r}.")


def draws(op: Op) -> int:
    """How many uniforms a colour op takes per sample."""
    return 2 * op.num_ops if isinstance(op, RandAugment) else op.draws


def check_channels(channels: int) -> None:
    """The colour ops take 1 or 3 channels, as torchvision's colour kernels."""
    if channels not in (1, 3):
        raise PipelineError(
            f"colour ops: Expected 1 or 3-channel images (torchvision refuses {channels}). Got {channels} "
            "(put RGB() first)."
        )


_jit = njit(inline="always", nogil=True, cache=True)
apply_pixel = _jit(colour_math.apply_pixel)
contrast_value = _jit(colour_math.contrast_value)
sharpen = _jit(colour_math.sharpen)
autocontrast_stats = _jit(colour_math.autocontrast_stats)
equalize_lut = _jit(colour_math.equalize_lut)
quantize = _jit(colour_math.quantize)


@_jit
def _sharpen_image(buf, spare, factor, bound, is_u8, channels, h, w):
    """SHARPNESS: interior values from the 3x3 neighbourhood of the state before the step."""
    if h <= 2 or w <= 2:
        return
    spare[:] = buf
    for y in range(1, h - 1):
        for x in range(1, w - 1):
            for c in range(channels):
                q = (y * w + x) * channels + c
                around = np.float32(0.0)
                for dy in range(-1, 2):
                    for dx in range(-1, 2):
                        if dy != 0 or dx != 0:
                            around += spare[q + (dy * w + dx) * channels]
                buf[q] = sharpen(spare[q], around, factor, bound, is_u8)


@_jit
def _image_stats(buf, code, is_u8, channels, pixels, stats, hist):
    """The statistics step ``code`` needs, over the image as it is now."""
    if code == CONTRAST:
        total = 0.0
        for p in range(pixels):
            q = p * channels
            v2 = buf[q + 2] if channels == 3 else buf[q]
            total += contrast_value(buf[q], buf[q + 1] if channels == 3 else buf[q], v2, channels, is_u8)
        stats[STAT_MEAN] = np.float32(total) / np.float32(pixels)
    elif code == AUTOCONTRAST:
        for c in range(channels):
            low, high = buf[c], buf[c]
            for p in range(pixels):
                low = min(low, buf[p * channels + c])
                high = max(high, buf[p * channels + c])
            stats[STAT_LOW + c], stats[STAT_INV + c] = autocontrast_stats(low, high, is_u8)
    elif code == EQUALIZE:
        hist[:] = 0
        for p in range(pixels):
            for c in range(channels):
                hist[c * 256 + quantize(buf[p * channels + c], is_u8)] += 1
        for c in range(channels):
            equalize_lut(hist, c * 256, stats, STAT_LUT + c * 256, pixels, is_u8)


@njit(parallel=True, nogil=True, cache=True)
def _colour_kernel(src, codes, args, is_u8, channels, h, w, scale, bias, kind, nchw, out):
    n = codes.shape[0]
    pixels = h * w
    size = pixels * channels
    bound = np.float32(255.0) if is_u8 else np.float32(1.0)
    for i in prange(n):
        buf = src[i * size : (i + 1) * size].copy()
        spare = np.empty_like(buf)
        stats = np.zeros(STATS, np.float32)
        hist = np.zeros(3 * 256, np.int64)
        for k in range(codes.shape[1]):
            code, arg = codes[i, k], args[i, k]
            if code == IDENTITY:
                continue
            if code == SHARPNESS:
                _sharpen_image(buf, spare, arg, bound, is_u8, channels, h, w)
                continue
            _image_stats(buf, code, is_u8, channels, pixels, stats, hist)
            for p in range(pixels):
                q = p * channels
                if channels == 3:
                    buf[q], buf[q + 1], buf[q + 2] = apply_pixel(
                        code, arg, bound, is_u8, 3, buf[q], buf[q + 1], buf[q + 2], stats
                    )
                else:
                    buf[q] = apply_pixel(code, arg, bound, is_u8, 1, buf[q], buf[q], buf[q], stats)[0]
        row = np.empty(w, np.float32)
        step = 1 if nchw else channels
        for c in range(channels):
            for y in range(h):
                for x in range(w):
                    row[x] = buf[(y * w + x) * channels + c]
                first = _out_index(i * size, c, y, 0, channels, h, w, nchw)
                _emit_row(row, False, False, scale[c], bias[c], kind, out, first, step)


def colour_cpu(
    scratch: np.ndarray, codes: np.ndarray, args: np.ndarray, is_u8: bool, channels: int, h: int, w: int,
    scale: np.ndarray, bias: np.ndarray, kind: int, nchw: bool, out: np.ndarray,
) -> None:  # fmt: skip
    """Run every sample's steps over ``scratch`` (float32, NHWC, uniform size) and write
    ``value * scale + bias``, cast, into the 1-D ``out`` in the output layout."""
    _colour_kernel(
        scratch, np.ascontiguousarray(codes, np.int32), np.ascontiguousarray(args, np.float64), is_u8, channels,
        h, w, scale, bias, kind, nchw, out,
    )  # fmt: skip


# Last, once every cached function above exists: the inlined modules are part of their key.
guard_disk_cache(globals(), (colour_math, sampling, bits, cpu))
