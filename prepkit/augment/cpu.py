"""Fused augmentation on the CPU: one numba pass from packed uint8 to the final array.

Crop, resize (bilinear / antialiased tent), flip, uint8 rounding, scale, normalize,
cast and layout happen while reading the source once; the only scratch memory is one
row of vertically filtered pixels per output row and the horizontal tap weights per
image. Rows of all images are spread over threads, so a batch of mixed sizes balances.

numba's CPU threading layer here is OpenMP: do not fork() after calling these kernels
(start workers with spawn or forkserver).

The kernels are cached on disk (``cache=True``). numba keys that cache on this file only;
:func:`prepkit.jitcache.guard_disk_cache` (end of this module) drops the entries compiled
from an older :mod:`prepkit.augment.sampling` or :mod:`prepkit.augment.bits`.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
from numba import njit, prange

from prepkit.augment import bits, sampling
from prepkit.augment.params import Params
from prepkit.jitcache import guard_disk_cache

_jit = njit(inline="always", nogil=True, cache=True)
filter_width = _jit(sampling.filter_width)
window_start = _jit(sampling.window_start)
window_stop = _jit(sampling.window_stop)
tap_weight = _jit(sampling.tap_weight)
axis_scale = _jit(sampling.axis_scale)
nearest_index = _jit(sampling.nearest_index)
finish_value = _jit(sampling.finish_value)
saturate_uint8 = _jit(sampling.saturate_uint8)
float16_from_bits = _jit(bits.float16_from_bits)
bfloat16_from_bits = _jit(bits.bfloat16_from_bits)

#: Output rows per dynamically scheduled chunk of the parallel loops.
CHUNK_ROWS = 8

#: Output kinds of the fused kernels (bfloat16 and float16 are written as uint16 bits).
KIND_FLOAT32, KIND_FLOAT16, KIND_BFLOAT16, KIND_UINT8 = 0, 1, 2, 3


class Plan(NamedTuple):
    """The value side of a compiled pipeline, as the kernels take it."""

    antialias: bool
    round_u8: bool
    scale: np.ndarray  # float32[C]: value * scale + bias after resampling
    bias: np.ndarray  # float32[C]
    kind: int  # KIND_*
    nchw: bool


@_jit
def _emit_row(row, flip, round_u8, scale, bias, kind, out, first, step):
    """Finish one channel of one output row: value ops, mirror, cast, strided store.

    Each step is its own simple loop (the branches sit outside them) so that LLVM
    vectorises them; ``row`` is overwritten.
    """
    w = row.shape[0]
    for x in range(w):
        row[x] = finish_value(row[x], round_u8, scale, bias)
    if flip:
        for x in range(w // 2):
            mirrored = row[w - 1 - x]
            row[w - 1 - x] = row[x]
            row[x] = mirrored
    if kind == KIND_FLOAT32:
        if step == 1:
            for x in range(w):
                out[first + x] = row[x]
        else:
            for x in range(w):
                out[first + x * step] = row[x]
    elif kind == KIND_UINT8:
        for x in range(w):
            out[first + x * step] = saturate_uint8(row[x])
    elif kind == KIND_FLOAT16:
        for x in range(w):
            out[first + x * step] = float16_from_bits(bits.float32_bits(row[x]))
    else:
        for x in range(w):
            out[first + x * step] = bfloat16_from_bits(bits.float32_bits(row[x]))


@_jit
def _row_starts(out_size):
    """Exclusive prefix sum of output rows per image (and the total last): the parallel loop
    runs over every output row of the batch and finds its image by binary search."""
    n = out_size.shape[0]
    row_base = np.zeros(n + 1, np.int64)
    for i in range(n):
        row_base[i + 1] = row_base[i] + out_size[i, 0]
    return row_base


@_jit
def _out_index(base, c, y, x, channels, h, w, nchw):
    if nchw:
        return base + (c * h + y) * w + x
    return base + (y * w + x) * channels + c


# fastmath: only reassociation and FMA contraction, which let LLVM vectorise the
# multiply-add loops; no reciprocal or finite-math shortcuts, which change results.
@njit(parallel=True, nogil=True, cache=True, fastmath={"reassoc", "contract"}, error_model="numpy")
def _augment_kernel(
    flat, offsets, shapes, region, resized, offset, flip, out_size,
    antialias, round_u8, ch_scale, ch_bias, kind, nchw, out, out_offsets,
):  # fmt: skip
    n = shapes.shape[0]
    channels = shapes[0, 2] if n > 0 else 1
    # Horizontal taps depend only on the output column: compute them once per image.
    max_w = 1
    max_taps = 2
    for i in range(n):
        max_w = max(max_w, out_size[i, 1])
        sx = axis_scale(region[i, 3], resized[i, 1])
        # A window holds at most 2 * width + 1 pixels; one spare tap for rounding.
        max_taps = max(max_taps, int(2.0 * filter_width(sx, antialias)) + 3)
    # Tap k of output column col reads line[x_index + k * channels] with weight
    # x_weight[i, k, col]; every column of image i gets x_taps[i] taps (the unused ones
    # weigh 0), so the horizontal pass is a fixed-length loop over taps around a loop
    # over columns, which vectorises.
    x_start = np.zeros((n, max_w), np.int64)
    x_index = np.zeros((n, max_w), np.int64)
    x_taps = np.zeros(n, np.int64)
    x_weight = np.zeros((n, max_taps, max_w), np.float32)
    for i in prange(n):
        sx = axis_scale(region[i, 3], resized[i, 1])
        fw = filter_width(sx, antialias)
        for col in range(out_size[i, 1]):
            r = offset[i, 1] + col  # column in the resized grid (before flipping)
            lo = window_start(r, sx, fw)
            hi = min(window_stop(r, sx, fw, region[i, 3]), lo + max_taps)
            total = np.float32(0.0)
            for j in range(lo, hi):
                total += tap_weight(j, r, sx, fw)
            for j in range(lo, hi):
                x_weight[i, j - lo, col] = tap_weight(j, r, sx, fw) / total
            x_start[i, col] = lo
            x_taps[i] = max(x_taps[i], hi - lo)
        for col in range(out_size[i, 1]):
            # Where column col's first tap sits in the row buffer (see the row loop).
            x_index[i, col] = (x_start[i, col] - x_start[i, 0]) * channels

    row_base = _row_starts(out_size)
    for t in prange(row_base[n]):
        i = np.searchsorted(row_base, t, side="right") - 1
        y = t - row_base[i]
        width = shapes[i, 1]
        y0, x0 = region[i, 0], region[i, 1]
        h, w = out_size[i, 0], out_size[i, 1]
        sy = axis_scale(region[i, 2], resized[i, 0])
        fw = filter_width(sy, antialias)
        r = offset[i, 0] + y
        lo = window_start(r, sy, fw)
        hi = window_stop(r, sy, fw, region[i, 2])
        total = np.float32(0.0)
        for j in range(lo, hi):
            total += tap_weight(j, r, sy, fw)
        # Vertical pass over the columns this output row reads, into one float row
        # (interleaved like the source, so the loop is a contiguous multiply-add;
        # zero-padded at the end for the padded horizontal taps).
        c0 = x_start[i, 0]
        span = (min(x_start[i, w - 1] + max_taps, region[i, 3]) - c0) * channels
        line = np.zeros(span + max_taps * channels, np.float32)
        head = line[:span]
        for j in range(lo, hi):
            wy = np.float32(tap_weight(j, r, sy, fw) / total)
            src = offsets[i] + ((y0 + j) * width + x0 + c0) * channels
            pixels = flat[src : src + span]
            for k in range(span):
                head[k] += wy * np.float32(pixels[k])
        # Horizontal pass, then value ops, cast, flip and layout per channel.
        taps = x_taps[i]
        row = np.empty(w, np.float32)
        step = 1 if nchw else channels
        for c in range(channels):
            row[:] = 0.0
            for k in range(taps):
                for col in range(w):
                    row[col] += x_weight[i, k, col] * line[x_index[i, col] + k * channels + c]
            first = _out_index(out_offsets[i], c, y, np.int64(0), channels, h, w, nchw)
            _emit_row(row, flip[i], round_u8, ch_scale[c], ch_bias[c], kind, out, first, step)


@njit(parallel=True, nogil=True, cache=True)
def _mask_kernel(
    flat, offsets, shapes, region, resized, offset, flip, out_size, exact, nchw, out, out_offsets
):
    n = shapes.shape[0]
    row_base = _row_starts(out_size)
    for t in prange(row_base[n]):
        i = np.searchsorted(row_base, t, side="right") - 1
        y = t - row_base[i]
        channels = shapes[i, 2]
        h, w = out_size[i, 0], out_size[i, 1]
        sy = nearest_index(offset[i, 0] + y, region[i, 2], resized[i, 0], exact)
        row = offsets[i] + ((region[i, 0] + sy) * shapes[i, 1] + region[i, 1]) * channels
        for x in range(w):
            col = w - 1 - x if flip[i] else x
            sx = nearest_index(offset[i, 1] + col, region[i, 3], resized[i, 1], exact)
            for c in range(channels):
                out[_out_index(out_offsets[i], c, y, x, channels, h, w, nchw)] = flat[row + sx * channels + c]


def augment(
    flat: np.ndarray, offsets: np.ndarray, shapes: np.ndarray, params: Params, plan: Plan,
    out: np.ndarray, out_offsets: np.ndarray,
) -> None:  # fmt: skip
    """Run the fused kernel, writing each image at ``out_offsets[i]`` of the 1-D ``out``."""
    # Small dynamic chunks of rows: images differ in cost, and a core shared with
    # another process must not hold up the whole batch (static halves would).
    with numba.parallel_chunksize(CHUNK_ROWS):
        _augment_kernel(
        flat, offsets, shapes, params.region, params.resized, params.offset, params.flip, params.out_size,
            plan.antialias, plan.round_u8, plan.scale, plan.bias, plan.kind, plan.nchw, out, out_offsets,
        )  # fmt: skip


def mask(
    flat: np.ndarray, offsets: np.ndarray, shapes: np.ndarray, params: Params, exact: bool, nchw: bool,
    out: np.ndarray, out_offsets: np.ndarray,
) -> None:  # fmt: skip
    """Nearest-neighbour twin of :func:`augment` for masks (uint8 in, uint8 out)."""
    with numba.parallel_chunksize(CHUNK_ROWS):
        _mask_kernel(
            flat, offsets, shapes, params.region, params.resized, params.offset, params.flip, params.out_size,
            exact, nchw, out, out_offsets,
        )  # fmt: skip


# Last, once every cached function above exists: the inlined modules are part of their key.
guard_disk_cache(globals(), (sampling, bits))
