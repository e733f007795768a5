"""Per-sample geometry: compose crops, one resize and flips into one source box.

Every geometric op is folded into four numbers per axis, so a fused kernel can go
from the stored uint8 pixels to the output in one pass:

* ``region``: the integer window of the source image that is fed to the resampler
  (torchvision crops first, then resizes the crop, so edge clamping happens at the
  window's border, not the image's);
* ``resized``: the size that window is resized to (equal to the window when the
  pipeline has no resampling op);
* ``offset``: where the output starts in the resized grid (crops after the resize);
* ``flip``: whether the output is mirrored left-right.

Output pixel (y, x) samples resized-grid pixel (offset_y + y, offset_x + x') with
x' = w - 1 - x when flipped, and resized pixel r maps to source coordinate
region_start + (r + 0.5) * region / resized - 0.5 (half-pixel centres).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from prepkit.augment import rng
from prepkit.augment.ops import CenterCrop, Op, RandomErasing, RandomHorizontalFlip, RandomResizedCrop, Resize
from prepkit.errors import PipelineError


@dataclass(frozen=True)
class Params:
    """Geometry of a batch, one row per sample (all int32 but ``flip``, which is bool)."""

    region: np.ndarray  # int32[N, 4]: y0, x0, h, w of the resampled window in the source
    resized: np.ndarray  # int32[N, 2]: size the window is resized to
    offset: np.ndarray  # int32[N, 2]: top, left of the output inside the resized grid
    out_size: np.ndarray  # int32[N, 2]: output h, w
    flip: np.ndarray  # bool[N]
    #: int32[N, 4]: top, left, h, w of RandomErasing's box in the output (h = 0: none).
    erase: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.int32))
    #: uint64[N]: per-sample key of RandomErasing's per-pixel normals (value="random").
    erase_key: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    #: int32[N, K]: the colour stage's steps per sample, in order (colour_math codes).
    colour_op: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int32))
    #: float64[N, K]: each step's argument (factor, hue shift, bits or solarize magnitude).
    colour_arg: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float64))
    #: float32[N, K, 10]: each geometric step's row (warp_math.WARP_*; zeros for colour steps).
    colour_warp: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 10), np.float32))

    def __len__(self) -> int:
        return int(self.flip.shape[0])

    @property
    def box(self) -> np.ndarray:
        """float64[N, 4]: y0, x0, h, w of each output in source pixels (before flipping)."""
        scale = self.region[:, 2:].astype(np.float64) / self.resized
        start = self.region[:, :2] + self.offset * scale
        return np.concatenate([start, self.out_size * scale], axis=1)

    def uniform_size(self) -> tuple[int, int]:
        """The (h, w) all outputs share, or a PipelineError naming the sizes found."""
        if len(self) == 0:
            raise PipelineError("batch: Expected at least one image. Got none.")
        sizes = np.unique(self.out_size, axis=0)
        if len(sizes) != 1:
            raise PipelineError(
                "batch: Expected every image to end at the same size (add CenterCrop or use "
                f"Resize((h, w))). Got sizes {[tuple(map(int, s)) for s in sizes[:4]]}."
            )
        return int(sizes[0][0]), int(sizes[0][1])

    def warp_rows(self) -> np.ndarray:
        """``colour_warp``, or zeros shaped like ``colour_op`` when it was not drawn (Params
        built by hand with colour steps only)."""
        if self.colour_warp.shape[:2] == self.colour_op.shape:
            return np.ascontiguousarray(self.colour_warp, dtype=np.float32)
        return np.zeros((*self.colour_op.shape, 10), np.float32)


def _random_resized_crop_boxes(
    op: RandomResizedCrop, height: np.ndarray, width: np.ndarray, u: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """torchvision's RandomResizedCrop.get_params, vectorised over samples and attempts.

    ``u`` is float64[N, 40]: per attempt k, columns 4k..4k+3 are the area, log-ratio,
    top and left draws. The first attempt whose box fits wins; if none of the 10 does,
    fall back to the centre crop clamped to the ratio range, as torchvision does.
    """
    n = height.shape[0]
    h64, w64 = height.astype(np.float64)[:, None], width.astype(np.float64)[:, None]
    area = h64 * w64
    u = u.reshape(n, 10, 4)
    target_area = area * (op.scale[0] + u[:, :, 0] * (op.scale[1] - op.scale[0]))
    log_lo, log_hi = np.log(op.ratio[0]), np.log(op.ratio[1])
    aspect = np.exp(log_lo + u[:, :, 1] * (log_hi - log_lo))
    # Python's round() is round-half-even, like np.rint.
    cw = np.rint(np.sqrt(target_area * aspect)).astype(np.int64)
    ch = np.rint(np.sqrt(target_area / aspect)).astype(np.int64)
    fits = (cw > 0) & (cw <= w64.astype(np.int64)) & (ch > 0) & (ch <= h64.astype(np.int64))
    top = np.floor(u[:, :, 2] * (height[:, None] - ch + 1)).astype(np.int64)
    left = np.floor(u[:, :, 3] * (width[:, None] - cw + 1)).astype(np.int64)
    first = np.argmax(fits, axis=1)
    rows = np.arange(n)
    found = fits[rows, first]

    # Centre-crop fallback for samples where no attempt fitted.
    in_ratio = width / height.astype(np.float64)
    too_wide = np.rint(height * op.ratio[1])
    fb_w = np.where(in_ratio < op.ratio[0], width, np.where(in_ratio > op.ratio[1], too_wide, width))
    fb_h = np.where(in_ratio < op.ratio[0], np.rint(width / op.ratio[0]), height)
    fb_w, fb_h = fb_w.astype(np.int64), fb_h.astype(np.int64)
    fb_top, fb_left = (height - fb_h) // 2, (width - fb_w) // 2

    pick = lambda a, b: np.where(found, a[rows, first], b)  # noqa: E731
    return pick(top, fb_top), pick(left, fb_left), pick(ch, fb_h), pick(cw, fb_w)


def random_erasing_boxes(op: RandomErasing, height: np.ndarray, width: np.ndarray, u: np.ndarray) -> np.ndarray:
    """torchvision's RandomErasing.get_params (and its ``p``), vectorised: int32[N, 4].

    ``u`` is float64[N, 41]: column 0 decides (erase when < p); per attempt k, columns
    1+4k..4+4k are the area, log-ratio, top and left draws. Note h takes
    ``sqrt(area * aspect)`` here (RandomResizedCrop gives that to w). A sample with no
    fitting attempt in 10, or not drawn, gets h = w = 0 (nothing erased).
    """
    n = height.shape[0]
    h64, w64 = height.astype(np.float64)[:, None], width.astype(np.float64)[:, None]
    tries = u[:, 1:].reshape(n, 10, 4)
    erase_area = h64 * w64 * (op.scale[0] + tries[:, :, 0] * (op.scale[1] - op.scale[0]))
    log_lo, log_hi = np.log(op.ratio[0]), np.log(op.ratio[1])
    aspect = np.exp(log_lo + tries[:, :, 1] * (log_hi - log_lo))
    eh = np.rint(np.sqrt(erase_area * aspect)).astype(np.int64)
    ew = np.rint(np.sqrt(erase_area / aspect)).astype(np.int64)
    fits = (eh < height[:, None]) & (ew < width[:, None])
    top = np.floor(tries[:, :, 2] * (height[:, None] - eh + 1)).astype(np.int64)
    left = np.floor(tries[:, :, 3] * (width[:, None] - ew + 1)).astype(np.int64)
    first = np.argmax(fits, axis=1)
    rows = np.arange(n)
    chosen = fits[rows, first] & (u[:, 0] < op.p)
    box = np.stack([top[rows, first], left[rows, first], eh[rows, first], ew[rows, first]], axis=1)
    return np.ascontiguousarray(np.where(chosen[:, None], box, 0), dtype=np.int32)


def _resize_output_size(op: Resize, height: np.ndarray, width: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """torchvision's _compute_resized_output_size (without max_size), vectorised."""
    if isinstance(op.size, tuple):
        return np.full_like(height, op.size[0]), np.full_like(width, op.size[1])
    short = np.minimum(height, width)
    long = np.maximum(height, width)
    # int(requested * long / short) in Python floats: truncation of a double.
    new_long = np.trunc(op.size * long.astype(np.float64) / short).astype(np.int64)
    new_short = np.full_like(short, op.size)
    portrait = width <= height
    return np.where(portrait, new_long, new_short), np.where(portrait, new_short, new_long)


def compute_params(
    ops: Sequence[Op], shapes: np.ndarray, indices: np.ndarray, seed: int, epoch: int, stream_offset: int = 0
) -> Params:
    """Draw and compose the geometry of ``ops`` for a batch (see the module docstring).

    ``stream_offset`` is the position of ``ops[0]`` in the pipeline it came from, so a
    split pipeline draws the same numbers as the whole.
    """
    shapes = np.asarray(shapes)
    if shapes.ndim != 2 or shapes.shape[1] != 3:
        raise PipelineError(f"shapes: Expected int[N, 3] (H, W, C). Got shape {shapes.shape}.")
    n = shapes.shape[0]
    indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    if indices.shape[0] != n:
        raise PipelineError(f"indices: Expected {n} sample indices (one per image). Got {indices.shape[0]}.")
    if n and shapes[:, :2].min() < 1:
        raise PipelineError(f"shapes: Expected every H and W >= 1. Got {shapes[shapes[:, :2].min(axis=1) < 1][0]}.")

    src_h, src_w = shapes[:, 0].astype(np.int64), shapes[:, 1].astype(np.int64)
    # Window in the source (before the resample) and offsets in the resized grid (after).
    y0, x0, rh, rw = np.zeros(n, np.int64), np.zeros(n, np.int64), src_h.copy(), src_w.copy()
    oy, ox = np.zeros(n, np.int64), np.zeros(n, np.int64)
    res_h, res_w = None, None
    cur_h, cur_w = src_h.copy(), src_w.copy()
    flipped = np.zeros(n, bool)
    erase, erase_key = np.zeros((n, 4), np.int32), np.zeros(n, np.uint64)
    colour_op, colour_arg = [np.zeros((n, 0), np.int32)], [np.zeros((n, 0))]
    colour_warp = [np.zeros((n, 0, 10), np.float32)]

    def crop(top: np.ndarray, left: np.ndarray, ch: np.ndarray, cw: np.ndarray) -> None:
        nonlocal y0, x0, rh, rw, oy, ox, cur_h, cur_w
        # A crop of a mirrored image at `left` is a crop of the unmirrored one at the
        # mirrored position.
        left = np.where(flipped, cur_w - left - cw, left)
        if res_h is None:
            y0, x0, rh, rw = y0 + top, x0 + left, ch, cw
        else:
            oy, ox = oy + top, ox + left
        cur_h, cur_w = ch, cw

    for position, op in enumerate(ops):
        stream = stream_offset + position
        if isinstance(op, RandomResizedCrop):
            u = rng.uniform(seed, epoch, indices, stream, op.draws)
            crop(*_random_resized_crop_boxes(op, cur_h, cur_w, u))
            res_h, res_w = np.full(n, op.size_hw[0], np.int64), np.full(n, op.size_hw[1], np.int64)
            cur_h, cur_w = res_h.copy(), res_w.copy()
        elif isinstance(op, Resize):
            res_h, res_w = _resize_output_size(op, cur_h, cur_w)
            cur_h, cur_w = res_h.copy(), res_w.copy()
        elif isinstance(op, CenterCrop):
            th, tw = op.size_hw
            too_big = (cur_h < th) | (cur_w < tw)
            if too_big.any():
                i = int(np.argmax(too_big))
                raise PipelineError(
                    f"CenterCrop{op.size}: Expected images at least that large. Got sample index "
                    f"{indices[i]} at {int(cur_h[i])}x{int(cur_w[i])} (torchvision pads with zeros; "
                    "prepkit does not: resize first)."
                )
            # int(round((H - h) / 2.0)): Python rounds halves to even, as np.rint.
            top = np.rint((cur_h - th) / 2.0).astype(np.int64)
            left = np.rint((cur_w - tw) / 2.0).astype(np.int64)
            crop(top, left, np.full(n, th, np.int64), np.full(n, tw, np.int64))
        elif isinstance(op, RandomHorizontalFlip):
            u = rng.uniform(seed, epoch, indices, stream, op.draws)[:, 0]
            flipped = flipped ^ (u < op.p)
        elif isinstance(op, RandomErasing):
            # The pipeline puts it after all geometry, so (cur_h, cur_w) is the output size.
            u = rng.uniform(seed, epoch, indices, stream, op.draws)
            erase = random_erasing_boxes(op, cur_h, cur_w, u)
            erase_key = rng.keys(seed, epoch, indices, stream)
        elif op.colour_stage:
            from prepkit.augment import colour  # lazy: colour imports cpu, which imports this module

            u = rng.uniform(seed, epoch, indices, stream, colour.draws(op))
            codes, args, warp = colour.steps(op, u, cur_h, cur_w)
            colour_op.append(codes)
            colour_arg.append(args)
            colour_warp.append(warp)
        # Value ops (ToDtype, Normalize) do not touch the geometry.

    if res_h is None:
        res_h, res_w = rh, rw
    as32 = lambda *cols: np.ascontiguousarray(np.stack(cols, axis=1), dtype=np.int32)  # noqa: E731
    return Params(
        region=as32(y0, x0, rh, rw),
        resized=as32(res_h, res_w),
        offset=as32(oy, ox),
        out_size=as32(cur_h, cur_w),
        flip=np.ascontiguousarray(flipped),
        erase=erase,
        erase_key=erase_key,
        colour_op=np.ascontiguousarray(np.concatenate(colour_op, axis=1), dtype=np.int32),
        colour_arg=np.ascontiguousarray(np.concatenate(colour_arg, axis=1), dtype=np.float64),
        colour_warp=np.ascontiguousarray(np.concatenate(colour_warp, axis=1), dtype=np.float32),
    )
