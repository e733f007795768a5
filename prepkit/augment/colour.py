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

Auto-augment's shears, translations and rotations are steps of the same pass: the host
computes each one's inverse affine matrix (:func:`geometric_step`, a row of ``Params.colour_warp``)
and the kernels resample the stage's buffer through it (:mod:`prepkit.augment.warp_math`), reading
a copy of the image as it was before the step. Masks follow those steps (:func:`warp_masks_cpu`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from prepkit.augment import bits, colour_math, cpu, sampling, warp_math
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
from prepkit.augment.warp_math import (
    AFFINE_BILINEAR,
    AFFINE_NEAREST,
    ROTATE_90,
    ROTATE_180,
    ROTATE_270,
    WARP,
    WARP_FILL,
    WARP_HAS_FILL,
)
from prepkit.errors import PipelineError
from prepkit.jitcache import guard_disk_cache

#: torchvision's auto-augment op list (v2 ``_AUGMENTATION_SPACE``), in its order.
AUGMENT_SPACE = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
                 "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize")  # fmt: skip
_CODES = {"Identity": IDENTITY, "Brightness": BRIGHTNESS, "Color": SATURATION, "Contrast": CONTRAST,
          "Sharpness": SHARPNESS, "Posterize": POSTERIZE, "Solarize": SOLARIZE, "AutoContrast": AUTOCONTRAST,
          "Equalize": EQUALIZE}  # fmt: skip
_FACTORS = ("Brightness", "Color", "Contrast", "Sharpness")
#: The ops that move pixels (an affine step of the stage).
GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
_SIGNED = _FACTORS + GEOMETRIC


def linspace_f32(start: float, end: float, steps: int) -> np.ndarray:
    """torch.linspace in float32: ``start + step * i`` up to half way, ``end - step * (steps - 1 - i)``
    after, each a fused multiply-add as torch's CPU kernel computes them."""
    start32, end32 = np.float32(start), np.float32(end)
    step = np.float64((end32 - start32) / np.float32(steps - 1))
    i = np.arange(steps, dtype=np.float64)
    low = (step * i + np.float64(start32)).astype(np.float32)
    high = (np.float64(end32) - step * (steps - 1 - i)).astype(np.float32)
    return np.where(i < steps // 2, low, high).astype(np.float32)


def magnitudes(name: str, bins: int, wide: bool, height: int = 1, width: int = 1) -> np.ndarray | None:
    """float64[bins]: the magnitude of each bin of op ``name`` (None when it takes none).

    TrivialAugmentWide (``wide``) and RandAugment's tables: 0..0.99 (0..0.9) for the
    factor ops, ``8 - round(k / ((bins - 1) / 6))`` (/ 4) bits for Posterize, 1..0 for Solarize,
    0..0.99 (0..0.3) for the shears, 0..32 pixels (0..150/331 of the ``width`` / ``height``)
    for the translations, 0..135 (0..30) degrees for Rotate.
    """
    ends = {"ShearX": (0.99, 0.3), "ShearY": (0.99, 0.3), "TranslateX": (32.0, 150.0 / 331.0 * width),
            "TranslateY": (32.0, 150.0 / 331.0 * height), "Rotate": (135.0, 30.0)}  # fmt: skip
    if name in _FACTORS:
        return linspace_f32(0.0, 0.99 if wide else 0.9, bins).astype(np.float64)
    if name in ends:
        return linspace_f32(0.0, ends[name][0 if wide else 1], bins).astype(np.float64)
    if name == "Posterize":
        k = np.arange(bins).astype(np.float32) / np.float32((bins - 1) / (6 if wide else 4))
        return (8 - np.rint(k).astype(np.int64)).astype(np.float64)
    if name == "Solarize":
        return linspace_f32(1.0, 0.0, bins).astype(np.float64)
    return None


def inverse_affine(
    center: tuple[float, float], angle: float, translate: tuple[float, float], shear: tuple[float, float]
) -> list[float]:
    """torchvision's ``_get_inverse_affine_matrix`` at scale 1, in float64: the 2x3 matrix
    taking output pixel positions (relative to the image centre) to input positions.

    With R the rotation, S the shear, C the centre and T the translation, the forward map is
    ``T C R S C^-1``; its inverse is ``C S^-1 R^-1 C^-1 T^-1``, whose 2x2 part is the inverse
    of ``[[a, b], [c, d]]`` (determinant 1) below.
    """
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -(a * math.tan(sx) + math.sin(rot))
    c = math.sin(rot - sy) / math.cos(sy)
    d = math.cos(rot) - c * math.tan(sx)
    m = [d, -b, 0.0, -c, a, 0.0]
    m[2] += cx - m[0] * (cx + tx) - m[1] * (cy + ty)
    m[5] += cy - m[3] * (cx + tx) - m[4] * (cy + ty)
    return m


def warp_row(matrix: list[float], height: int, width: int, fill: tuple[float, ...] | None) -> np.ndarray:
    """float32[WARP]: ``matrix`` as ``_affine_grid`` uses it (float32, each row divided by half
    the size of its output axis), then the fill flag and values."""
    row = np.zeros(WARP, np.float32)
    half = (np.float32(0.5 * width), np.float32(0.5 * height))
    for j in range(6):
        row[j] = np.float32(matrix[j]) / half[j // 3]
    if fill is not None:
        row[WARP_HAS_FILL] = 1.0
        row[WARP_FILL : WARP_FILL + 3] = np.broadcast_to(np.asarray(fill, np.float32), (3,))
    return row


def geometric_step(
    name: str, magnitude: float, height: int, width: int, op: TrivialAugmentWide | RandAugment
) -> tuple[int, np.ndarray]:
    """(code, warp row) of a signed shear, translation or rotation as torchvision's
    ``_apply_image_or_video_transform`` calls affine / rotate: shears about the top-left
    corner with ``degrees(atan(m))``, translations by ``int(m)`` pixels, rotations about the
    centre with rotate's fast paths for multiples of 90 degrees."""
    row = np.zeros(WARP, np.float32)
    if name == "Rotate":
        angle = magnitude % 360.0
        if angle == 0.0:
            return IDENTITY, row
        if angle == 180.0:
            return ROTATE_180, row
        if height == width and angle in (90.0, 270.0):
            return (ROTATE_90 if angle == 90.0 else ROTATE_270), row
        matrix = inverse_affine((0.0, 0.0), -angle, (0.0, 0.0), (0.0, 0.0))
    elif name in ("ShearX", "ShearY"):
        degrees = math.degrees(math.atan(magnitude))
        shear = (degrees, 0.0) if name == "ShearX" else (0.0, degrees)
        matrix = inverse_affine((-width * 0.5, -height * 0.5), 0.0, (0.0, 0.0), shear)
    else:
        shift = float(int(magnitude))
        matrix = inverse_affine((0.0, 0.0), 0.0, (shift, 0.0) if name == "TranslateX" else (0.0, shift), (0.0, 0.0))
    code = AFFINE_BILINEAR if op.interpolation == "bilinear" else AFFINE_NEAREST
    return code, warp_row(matrix, height, width, op.fill)


def _auto_step(
    op: TrivialAugmentWide | RandAugment, names: np.ndarray, chosen: np.ndarray, negate: np.ndarray,
    height: np.ndarray, width: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """(codes, args, warp rows) of one auto-augment op per sample: factor ops take
    ``1 + (+-magnitude)``, Posterize its bits, Solarize its magnitude (the kernel multiplies
    by the data's bound), geometric ops a warp row."""
    n = names.shape[0]
    wide = isinstance(op, TrivialAugmentWide)
    magnitude = np.zeros(n)
    for k, name in enumerate(AUGMENT_SPACE):
        sizes = np.unique(np.stack([height, width], axis=1), axis=0) if name.startswith("Translate") else [(1, 1)]
        for h, w in sizes:
            table = magnitudes(name, op.num_magnitude_bins, wide, int(h), int(w))
            if table is not None:
                pick = (names == k) & ((height == h) & (width == w) if name.startswith("Translate") else True)
                magnitude = np.where(pick, table[chosen], magnitude)
    signed = np.isin(names, [AUGMENT_SPACE.index(s) for s in _SIGNED])
    magnitude = np.where(signed & negate, -magnitude, magnitude)
    factor = np.isin(names, [AUGMENT_SPACE.index(s) for s in _FACTORS])
    args = np.where(factor, 1.0 + magnitude, magnitude)
    codes = np.array([_CODES.get(AUGMENT_SPACE[k], IDENTITY) for k in names], np.int32)
    warp = np.zeros((n, WARP), np.float32)
    for s in np.flatnonzero(np.isin(names, [AUGMENT_SPACE.index(g) for g in GEOMETRIC])):
        codes[s], warp[s] = geometric_step(AUGMENT_SPACE[names[s]], float(magnitude[s]), int(height[s]), int(width[s]), op)
        args[s] = 0.0
    return codes, args, warp


def _pick(u: np.ndarray, count: int) -> np.ndarray:
    """int64 index in [0, count) from uniforms (torch.randint's role)."""
    return np.minimum((u * count).astype(np.int64), count - 1)


def steps(op: Op, u: np.ndarray, height: np.ndarray, width: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int32[N, K] step codes, float64[N, K] arguments and float32[N, K, WARP] warp rows of
    one colour op, from its uniforms and the (h, w) of each image at the stage."""
    n = u.shape[0]
    height, width = np.broadcast_to(height, (n,)), np.broadcast_to(width, (n,))
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
        return codes, np.take_along_axis(factors, order, axis=1), np.zeros((n, 4, WARP), np.float32)
    if isinstance(op, TrivialAugmentWide):
        names = _pick(u[:, 0], len(AUGMENT_SPACE))
        codes, args, warp = _auto_step(op, names, _pick(u[:, 1], op.num_magnitude_bins), u[:, 2] <= 0.5, height, width)
        return codes[:, None], args[:, None], warp[:, None]
    if isinstance(op, RandAugment):
        columns = []
        for j in range(op.num_ops):
            names = _pick(u[:, 2 * j], len(AUGMENT_SPACE))
            chosen = np.full(n, op.magnitude, np.int64)
            columns.append(_auto_step(op, names, chosen, u[:, 2 * j + 1] <= 0.5, height, width))
        if not columns:
            return np.zeros((n, 0), np.int32), np.zeros((n, 0)), np.zeros((n, 0, WARP), np.float32)
        return tuple(np.stack([c[part] for c in columns], axis=1) for part in range(3))  # type: ignore[return-value]
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
is_warp = _jit(warp_math.is_warp)
warp_pixel = _jit(warp_math.warp_pixel)
nearest_source = _jit(warp_math.nearest_source)


@_jit
def _warp_image(buf, spare, code, warp, i, k, is_u8, channels, h, w):
    """A geometric step: every output pixel sampled from the state before the step."""
    spare[:] = buf
    small = h * w < warp_math.SMALL_GRID_PIXELS
    for p in range(h * w):
        v0, v1, v2 = warp_pixel(spare, 0, channels, h, w, p % w, p // w, code, warp, i, k, small, is_u8)
        buf[p * channels] = v0
        if channels == 3:
            buf[p * channels + 1] = v1
            buf[p * channels + 2] = v2


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
def _colour_kernel(src, codes, args, warp, is_u8, channels, h, w, scale, bias, kind, nchw, out):
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
            if is_warp(code):
                _warp_image(buf, spare, code, warp, i, k, is_u8, channels, h, w)
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
                first = _out_index(i * size, c, y, np.int64(0), channels, h, w, nchw)
                _emit_row(row, False, False, scale[c], bias[c], kind, out, first, step)


def colour_cpu(
    scratch: np.ndarray, codes: np.ndarray, args: np.ndarray, warp: np.ndarray, is_u8: bool, channels: int, h: int, w: int,
    scale: np.ndarray, bias: np.ndarray, kind: int, nchw: bool, out: np.ndarray,
) -> None:  # fmt: skip
    """Run every sample's steps over ``scratch`` (float32, NHWC, uniform size) and write
    ``value * scale + bias``, cast, into the 1-D ``out`` in the output layout. ``warp`` holds
    the geometric steps' rows (``Params.warp_rows()``)."""
    _colour_kernel(
        scratch, np.ascontiguousarray(codes, np.int32), np.ascontiguousarray(args, np.float64),
        np.ascontiguousarray(warp, np.float32), is_u8, channels,
        h, w, scale, bias, kind, nchw, out,
    )  # fmt: skip


@njit(parallel=True, nogil=True, cache=True)
def _mask_warp_kernel(out, codes, warp, channels, h, w, nchw):
    n = codes.shape[0]
    size = h * w * channels
    small = h * w < warp_math.SMALL_GRID_PIXELS
    for i in prange(n):
        spare = np.empty(size, np.uint8)
        for k in range(codes.shape[1]):
            code = codes[i, k]
            if not is_warp(code):
                continue
            spare[:] = out[i * size : (i + 1) * size]
            for p in range(h * w):
                q = nearest_source(code, p % w, p // w, h, w, warp, i, k, small)
                for c in range(channels):
                    value = np.uint8(0) if q < 0 else spare[_out_index(np.int64(0), c, q // w, q % w, channels, h, w, nchw)]
                    out[_out_index(i * size, c, p // w, p % w, channels, h, w, nchw)] = value


def warp_masks_cpu(out: np.ndarray, codes: np.ndarray, warp: np.ndarray, channels: int, h: int, w: int, nchw: bool) -> None:
    """Move uint8 masks (1-D ``out``, in the output layout) as the geometric steps move the
    images: nearest sampling (bilinear steps too), 0 where the image is uncovered."""
    _mask_warp_kernel(out, np.ascontiguousarray(codes, np.int32), np.ascontiguousarray(warp, np.float32), channels,
                      h, w, nchw)  # fmt: skip


def has_warp(codes: np.ndarray) -> bool:
    """Does any sample have a geometric step?"""
    return bool((codes >= AFFINE_NEAREST).any())


def check_fill(ops: tuple[Op, ...], channels: int) -> None:
    """Auto-augment fills take 1 value or one per channel, as torchvision's."""
    for op in ops:
        fill = op.fill if isinstance(op, (TrivialAugmentWide, RandAugment)) else None
        if fill is not None and len(fill) not in (1, channels):
            raise PipelineError(
                f"{type(op).__name__}.fill: Expected 1 or {channels} values for {channels}-channel images. "
                f"Got {len(fill)}."
            )


# Last, once every cached function above exists: the inlined modules are part of their key.
guard_disk_cache(globals(), (colour_math, warp_math, sampling, bits, cpu))
