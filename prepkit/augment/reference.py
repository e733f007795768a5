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


# -- the colour stage ------------------------------------------------------------------
#
# Vectorised numpy restatement of torchvision's colour kernels in float32, on one HWC image
# whose uint8 values are carried as whole float32 numbers (see colour_math for the scalar
# version the kernels use).

_F = np.float32


def _fma(a: np.ndarray, b: np.float32, c: np.ndarray) -> np.ndarray:
    """a * b + c rounded once to float32 (torch's add_ with alpha is a fused multiply-add)."""
    return (np.asarray(a, np.float64) * np.float64(b) + np.asarray(c, np.float64)).astype(np.float32)


def _settle(v: np.ndarray, bound: np.float32, is_u8: bool) -> np.ndarray:
    v = np.clip(v, _F(0), bound).astype(np.float32)
    return np.floor(v) if is_u8 else v


def _gray(img: np.ndarray, is_u8: bool) -> np.ndarray:
    g = _fma(img[..., 1], _F(0.587), img[..., 0] * _F(0.2989))
    g = _fma(img[..., 2], _F(0.114), g)
    return np.floor(g) if is_u8 else g


def _hue(img: np.ndarray, hue: float, is_u8: bool) -> np.ndarray:
    x = img * _F(1.0 / 255) if is_u8 else img
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    maxc, minc = x.max(axis=-1), x.min(axis=-1)
    eq = maxc == minc
    span = maxc - minc
    s = span / np.where(eq, _F(1), maxc)
    div = np.where(eq, _F(1), span)
    rc, gc, bc = (maxc - r) / div, (maxc - g) / div, (maxc - b) / div
    h = np.where(maxc == r, bc - gc, np.where(maxc == g, (rc + _F(2)) - bc, (gc + _F(4)) - rc))
    h = np.fmod(h * _F(1.0 / 6.0) + _F(1), _F(1))
    h = np.remainder(h + _F(hue), _F(1))
    h6 = h * _F(6)
    i = np.floor(h6)
    f = h6 - i
    i = i.astype(np.int64) % 6
    sv = s * maxc
    p = np.clip(maxc - sv, _F(0), _F(1))
    svf = sv * f
    q = np.clip(maxc - svf, _F(0), _F(1))
    t = np.clip(svf + p, _F(0), _F(1))
    table = np.stack([maxc, p, q, t])  # v, p, q, t as torchvision's select indices
    select = np.array([[0, 2, 1, 1, 3, 0], [3, 0, 0, 2, 1, 1], [1, 1, 3, 0, 0, 2]])
    out = np.stack([np.take_along_axis(table, select[c][i][None], 0)[0] for c in range(3)], axis=-1)
    if is_u8:
        return np.clip(np.trunc(out * _F(255.999)), 0, 255).astype(np.float32)
    return out.astype(np.float32)


def _equalize(img: np.ndarray, is_u8: bool) -> np.ndarray:
    q = img.astype(np.int64) if is_u8 else np.clip(np.trunc(img * _F(255.999)), 0, 255).astype(np.int64)
    out = np.empty(img.shape, np.float32)
    for c in range(img.shape[-1]):
        hist = np.bincount(q[..., c].ravel(), minlength=256)
        step = (q[..., c].size - hist[np.nonzero(hist)[0][-1]]) // 255
        if step == 0:
            lut = np.arange(256)
        else:
            cum = np.cumsum(hist)[:-1]
            lut = np.concatenate([[0], np.minimum((cum + step // 2) // step, 255)])
        out[..., c] = lut[q[..., c]]
    return out if is_u8 else out * _F(1.0 / 255)


def warp(img: np.ndarray, code: int, row: np.ndarray, is_u8: bool) -> np.ndarray:
    """A geometric step of the colour stage on one float32 HWC image: torchvision's affine
    grid (pixel centres about the image centre times ``row``'s rescaled inverse matrix, the
    two sums as torch's CPU bmm rounds them) and grid_sample, or a rot90 fast path."""
    from prepkit.augment import warp_math as wm

    if code in (wm.ROTATE_90, wm.ROTATE_180, wm.ROTATE_270):
        return np.ascontiguousarray(np.rot90(img, {wm.ROTATE_90: 1, wm.ROTATE_180: 2, wm.ROTATE_270: 3}[code]))
    h, w, channels = img.shape
    xb = (np.arange(w, dtype=np.float32) - _F(0.5 * (w - 1)))[None, :]
    yb = (np.arange(h, dtype=np.float32) - _F(0.5 * (h - 1)))[:, None]

    def grid(a: np.float32, b: np.float32, c: np.float32) -> np.ndarray:
        if h * w < wm.SMALL_GRID_PIXELS:  # torch's small-matrix loop
            return (xb * a + yb * b) + c
        return _fma(np.broadcast_to(yb, (h, w)), b, np.broadcast_to(xb * a, (h, w))) + c  # its gemm

    gx, gy = grid(*row[0:3]), grid(*row[3:6])
    ix = _fma(gx + _F(1), _F(0.5 * w), np.full((h, w), _F(-0.5)))  # torch's kernel fuses these
    iy = _fma(gy + _F(1), _F(0.5 * h), np.full((h, w), _F(-0.5)))
    padded = np.zeros((h + 2, w + 2, channels), np.float32)  # one ring of grid_sample's zeros
    padded[1:-1, 1:-1] = img
    fill = row[wm.WARP_FILL : wm.WARP_FILL + channels]
    has_fill = row[wm.WARP_HAS_FILL] != 0
    if code == wm.AFFINE_NEAREST:
        x, y = np.rint(ix).astype(np.int64), np.rint(iy).astype(np.int64)
        inside = (x >= 0) & (x < w) & (y >= 0) & (y < h)
        out = np.where(inside[..., None], padded[np.where(inside, y, -1) + 1, np.where(inside, x, -1) + 1], _F(0))
        if has_fill:
            out = np.where(inside[..., None], out, fill)
    else:
        x0, y0 = np.floor(ix), np.floor(iy)
        we, no = ix - x0, iy - y0
        ea, so = _F(1) - we, _F(1) - no
        x0, y0 = x0.astype(np.int64), y0.astype(np.int64)

        weights = ((so * ea)[..., None], (so * we)[..., None], (no * ea)[..., None], (no * we)[..., None])

        def sample(source: np.ndarray) -> np.ndarray:
            """grid_sample's nw + ne + sw + se of a zero-ringed image."""
            total = np.zeros((h, w, source.shape[-1]), np.float32)
            for (dy, dx), weight in zip(((0, 0), (0, 1), (1, 0), (1, 1)), weights, strict=True):
                y, x = y0 + dy, x0 + dx
                inside = (x >= 0) & (x < w) & (y >= 0) & (y < h)
                value = source[np.where(inside, y, -1) + 1, np.where(inside, x, -1) + 1]
                total = (np.asarray(value, np.float64) * weight + total).astype(np.float32)  # fused, as torch
            return total

        out = sample(padded)
        if has_fill:  # the mask: ones sampled the same way
            ones = np.zeros((h + 2, w + 2, 1), np.float32)
            ones[1:-1, 1:-1] = 1
            out = ((out - fill) * sample(ones)).astype(np.float32) + fill
    out = out.astype(np.float32)
    return np.clip(np.rint(out), 0, 255).astype(np.float32) if is_u8 else out


def colour(
    image: np.ndarray, codes: np.ndarray, args: np.ndarray, is_u8: bool, warps: np.ndarray | None = None
) -> np.ndarray:
    """The colour stage's steps on one float32 HWC image (1 or 3 channels), in order;
    ``warps`` (float32[K, WARP]) holds the geometric steps' rows."""
    from prepkit.augment import colour_math as cm
    from prepkit.augment import warp_math as wm

    img = image.astype(np.float32).copy()
    bound = _F(255 if is_u8 else 1)
    rgb = img.shape[-1] == 3
    for k, (code, arg) in enumerate(zip(codes, args, strict=True)):
        ratio, rest = _F(arg), _F(1.0 - arg)
        if wm.is_warp(code):
            assert warps is not None, "a geometric step needs its warp row"
            img = warp(img, int(code), warps[k], is_u8)
        elif code == cm.BRIGHTNESS:
            img = _settle(img * ratio, bound, is_u8)
        elif code == cm.CONTRAST:
            values = _gray(img, is_u8) if rgb else img[..., 0]
            mean = _F(values.astype(np.float64).sum()) / _F(values.size)
            img = _settle(_fma(np.full_like(img, mean), rest, img * ratio), bound, is_u8)
        elif code == cm.SATURATION and rgb:
            img = _settle(_fma(np.broadcast_to(_gray(img, is_u8)[..., None], img.shape), rest, img * ratio), bound, is_u8)
        elif code == cm.HUE and rgb:
            img = _hue(img, arg, is_u8)
        elif code == cm.SHARPNESS and img.shape[0] > 2 and img.shape[1] > 2:
            h, w = img.shape[:2]
            around = np.zeros((h - 2, w - 2, img.shape[2]), np.float32)
            for dy, dx in ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)):
                around += img[1 + dy : h - 1 + dy, 1 + dx : w - 1 + dx]
            centre = img[1:-1, 1:-1]
            if is_u8:
                blur = ((around.astype(np.int64) + 5 * centre.astype(np.int64) + 6) // 13).astype(np.float32)
            else:
                blur = around * _F(1.0 / 13.0) + centre * _F(5.0 / 13.0)
            img[1:-1, 1:-1] = _settle(_fma(blur - centre, rest, centre), bound, is_u8)
        elif code == cm.POSTERIZE:
            bits = int(arg)
            if is_u8:
                if bits < 8:
                    img = (img.astype(np.int64) & (((1 << bits) - 1) << (8 - bits))).astype(np.float32)
            else:
                levels = 1 << bits
                img = np.clip(np.floor(img * _F(levels)), 0, levels - 1).astype(np.float32) * _F(1.0 / levels)
        elif code == cm.SOLARIZE:
            threshold = _F((255.0 if is_u8 else 1.0) * arg)
            img = np.where(img >= threshold, bound - img, img).astype(np.float32)
        elif code == cm.AUTOCONTRAST:
            low, high = img.min(axis=(0, 1)), img.max(axis=(0, 1))
            flat = high == low
            inv = np.where(flat, _F(1), (high - low) * _F(1.0 / 255 if is_u8 else 1.0)).astype(np.float32)
            img = _settle((img - np.where(flat, _F(0), low)) / inv, bound, is_u8)
        elif code == cm.EQUALIZE:
            img = _equalize(img, is_u8)
    return img
