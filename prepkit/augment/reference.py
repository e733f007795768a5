"""The oracle: the fused augmentation written plainly in numpy, one image at a time.

Slow and obvious on purpose; the numba CPU and CUDA kernels are tested against it. It
restates the definitions in :mod:`prepkit.augment.sampling` as dense weight matrices
(output pixels x input pixels) instead of sharing that code.
"""

from __future__ import annotations

import numpy as np

from prepkit.augment.params import Params
from prepkit.augment.sampling import ROUND_MARGIN


def tent_weights(in_size: int, out_size: int, antialias: bool) -> np.ndarray:
    """float64[out_size, in_size]: row r holds the normalised weights of output pixel r."""
    scale = in_size / out_size
    width = scale if (antialias and scale > 1.0) else 1.0
    centers_out = (np.arange(out_size)[:, None] + 0.5) * scale
    centers_in = np.arange(in_size)[None, :] + 0.5
    weights = np.clip(1.0 - np.abs(centers_in - centers_out) / width, 0.0, None)
    return weights / weights.sum(axis=1, keepdims=True)


def nearest_indices(in_size: int, out_size: int, exact: bool) -> np.ndarray:
    """int64[out_size]: torch's "nearest" (floor(r*s)) or "nearest-exact" (floor((r+.5)*s))."""
    scale = np.float32(in_size) / np.float32(out_size)
    r = np.arange(out_size, dtype=np.float32)
    position = (r + np.float32(0.5)) * scale if exact else r * scale
    return np.minimum(np.floor(position).astype(np.int64), in_size - 1)


def _image(flat: np.ndarray, offsets: np.ndarray, shapes: np.ndarray, i: int) -> np.ndarray:
    h, w, c = (int(v) for v in shapes[i])
    return flat[offsets[i] : offsets[i] + h * w * c].reshape(h, w, c)


def _window(image: np.ndarray, params: Params, i: int) -> np.ndarray:
    y0, x0, h, w = (int(v) for v in params.region[i])
    return image[y0 : y0 + h, x0 : x0 + w].astype(np.float64)


def _place(sample: np.ndarray, params: Params, i: int) -> np.ndarray:
    """Crop the output box out of a resized HxWxC grid and mirror it if asked."""
    oy, ox = (int(v) for v in params.offset[i])
    h, w = (int(v) for v in params.out_size[i])
    sample = sample[oy : oy + h, ox : ox + w]
    return sample[:, ::-1] if params.flip[i] else sample


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even, NaN kept NaN."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    return np.where(nan, ((bits >> 16) & 0x8000).astype(np.uint16) | np.uint16(0x7FC0), rounded)


def encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """Cast float64 results to the output dtype the kernels write."""
    if dtype == "uint8":
        return np.trunc(np.clip(np.nan_to_num(values, nan=0.0), 0, 255)).astype(np.uint8)
    f32 = values.astype(np.float32)
    if dtype == "float32":
        return f32
    if dtype == "float16":
        return f32.astype(np.float16)
    return bfloat16_bits(f32)


def augment(
    flat: np.ndarray,
    offsets: np.ndarray,
    shapes: np.ndarray,
    params: Params,
    *,
    antialias: bool,
    round_u8: bool,
    scale: np.ndarray,
    bias: np.ndarray,
    dtype: str,
    layout: str,
) -> list[np.ndarray]:
    """The fused pipeline per image: a list of (C, h, w) or (h, w, C) arrays."""
    results = []
    for i in range(len(params)):
        window = _window(_image(flat, offsets, shapes, i), params, i)
        rows = tent_weights(window.shape[0], int(params.resized[i, 0]), antialias)
        cols = tent_weights(window.shape[1], int(params.resized[i, 1]), antialias)
        resized = np.einsum("yh,hwc,xw->yxc", rows, window, cols)
        sample = _place(resized, params, i)
        if round_u8:
            sample = np.clip(np.floor(sample + 0.5 + ROUND_MARGIN), 0, 255)
        sample = encode(sample * scale + bias, dtype)
        results.append(np.ascontiguousarray(sample.transpose(2, 0, 1) if layout == "NCHW" else sample))
    return results


def mask(
    flat: np.ndarray, offsets: np.ndarray, shapes: np.ndarray, params: Params, *, exact: bool, layout: str
) -> list[np.ndarray]:
    """The same geometry with nearest-neighbour sampling and no value ops (uint8)."""
    results = []
    for i in range(len(params)):
        window = _window(_image(flat, offsets, shapes, i), params, i)
        rows = nearest_indices(window.shape[0], int(params.resized[i, 0]), exact)
        cols = nearest_indices(window.shape[1], int(params.resized[i, 1]), exact)
        sample = _place(window[rows][:, cols], params, i).astype(np.uint8)
        results.append(np.ascontiguousarray(sample.transpose(2, 0, 1) if layout == "NCHW" else sample))
    return results
